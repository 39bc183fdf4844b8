package adminmode

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"net/url"
	"slices"
	"testing"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"

	"github.com/seqd/seqd/admin/adminpb"
	"github.com/seqd/seqd/spec"
)

// TestConnectPassesIdentities: the mode learns the caller's verified
// client-certificate identities (atomics admits by them on a NIC), and
// none for an unverified certificate.
func TestConnectPassesIdentities(t *testing.T) {
	u, _ := url.Parse("spiffe://seq/client")
	leaf := &x509.Certificate{Subject: pkix.Name{CommonName: "seq-client"}, URIs: []*url.URL{u}}
	req := &adminpb.ConnectRequest{Qps: []*adminpb.Endpoint{pb(addr(2), 8)}, ClientName: "c", ProtocolVersion: spec.ProtocolVersion}
	for _, c := range []struct {
		name  string
		state tls.ConnectionState
		want  []string
	}{
		{"verified", tls.ConnectionState{PeerCertificates: []*x509.Certificate{leaf}, VerifiedChains: [][]*x509.Certificate{{leaf}}},
			[]string{"seq-client", "spiffe://seq/client"}},
		{"unverified", tls.ConnectionState{PeerCertificates: []*x509.Certificate{leaf}}, nil},
	} {
		m := &fakeMode{}
		b := &Backend{Mode: m, Name: spec.ModeAtomics, Format: spec.FormatCounter}
		ctx := peer.NewContext(context.Background(), &peer.Peer{AuthInfo: credentials.TLSInfo{State: c.state}})
		if _, err := b.Connect(ctx, req); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := m.admitted[0].Identities; !slices.Equal(got, c.want) {
			t.Errorf("%s: the mode was admitted with identities %q, want %q", c.name, got, c.want)
		}
	}
}
