package client

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/seqd/seqd/admin/adminpb"
	"github.com/seqd/seqd/spec"
	"github.com/seqd/seqd/verbs"
)

// TestDialRefusesMalformedGrant: a UD mode's dialer refuses, as
// unavailable, a Connect answer its data path cannot use, before it sends
// anything: each case is a valid answer with one field broken. Before the
// one decoder (admin/handshake), Spec-S0's dialer read the answer itself
// and, like FaSST's, took a server QPN above 24 bits (a NIC puts 24 bits
// of it on the wire: the requests go to another QP) or QPN 0, and an
// answer for another mode than it asked for.
func TestDialRefusesMalformedGrant(t *testing.T) {
	refusesMalformed(t, spec.ModeSpecS0, dialSpecS0)
	refusesMalformed(t, spec.ModeFaSST, dialFaSST)
}

func refusesMalformed(t *testing.T, mode string, dial dialer) {
	const qps, window = 2, 8
	srv, _ := verbs.Address{GID: verbs.GIDFromAddr(netip.MustParseAddr("127.0.0.1")), Port: 4791}.MarshalBinary()
	valid := func() *adminpb.ConnectResponse {
		return &adminpb.ConnectResponse{SessionId: 1, Mode: mode, Format: "hybrid", ProtocolVersion: spec.ProtocolVersion,
			Epoch: 3, Window: window, Qkey: 0x1234, AnswerQkey: 0x5678, Assignment: []uint32{0, 1},
			ServerQps: []*adminpb.Endpoint{{Address: srv, Qpn: 0x100}, {Address: srv, Qpn: 0x101}},
			AnswerQps: []*adminpb.Endpoint{{Address: srv, Qpn: 0x200}}}
	}
	for _, c := range []struct {
		name  string
		spoil func(*adminpb.ConnectResponse)
	}{
		{"valid", func(*adminpb.ConnectResponse) {}},
		{"server QPN above 24 bits", func(r *adminpb.ConnectResponse) { r.ServerQps[1].Qpn = 1<<24 | 0x101 }},
		{"server QPN 0", func(r *adminpb.ConnectResponse) { r.ServerQps[0].Qpn = 0 }},
		{"answer QPN above 24 bits", func(r *adminpb.ConnectResponse) { r.AnswerQps[0].Qpn = 1 << 24 }},
		{"another mode", func(r *adminpb.ConnectResponse) { r.Mode = spec.ModeHERD }},
		{"assignment out of range", func(r *adminpb.ConnectResponse) { r.Assignment[1] = 2 }},
		{"short address", func(r *adminpb.ConnectResponse) { r.ServerQps[0].Address = srv[:4] }},
	} {
		t.Run(mode+"/"+c.name, func(t *testing.T) {
			dev := openSoft(t, "")
			pd, err := dev.AllocPD()
			if err != nil {
				t.Fatal(err)
			}
			defer pd.Close()
			resp := valid()
			c.spoil(resp)
			env := &transportEnv{dev: dev, pd: pd, qps: qps, window: window, retransmit: time.Second, st: &stats{},
				now:     func() time.Duration { return 0 },
				connect: func(context.Context, *adminpb.ConnectRequest) (*adminpb.ConnectResponse, error) { return resp, nil }}
			tr, err := dial(context.Background(), env)
			if c.name == "valid" {
				if err != nil {
					t.Fatalf("dial refused a valid answer: %v", err)
				}
				tr.Close()
				return
			}
			if err == nil {
				tr.Close()
				t.Fatalf("dial accepted an answer with %s", c.name)
			}
			if !errors.Is(err, ErrUnavailable) {
				t.Fatalf("dial = %v, want ErrUnavailable", err)
			}
		})
	}
}
