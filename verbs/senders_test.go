package verbs_test

import (
	"net/netip"
	"testing"

	"github.com/seqd/seqd/verbs"
)

func TestSendersMatch(t *testing.T) {
	srv := verbs.Address{GID: verbs.GIDFromAddr(netip.MustParseAddr("127.0.0.1")), LID: 3, Port: 4791}
	s := verbs.Senders{verbs.SenderOf(srv, 0x101), verbs.SenderOf(srv, 0x102)}
	other := srv
	other.Port = 4792
	otherIP := srv
	otherIP.GID = verbs.GIDFromAddr(netip.MustParseAddr("127.0.0.2"))
	noLID := srv
	noLID.LID = 0
	for _, tc := range []struct {
		name string
		src  verbs.Address
		qpn  verbs.QPN
		want bool
	}{
		{"a response QP", srv, 0x102, true},
		{"the LID plays no part", noLID, 0x101, true},
		{"another QPN", srv, 0x103, false},
		{"another port", other, 0x101, false},
		{"another address", otherIP, 0x101, false},
	} {
		wc := verbs.WC{SrcQP: tc.qpn, Src: tc.src}
		if got := s.Match(&wc); got != tc.want {
			t.Errorf("%s: Match = %v, want %v", tc.name, got, tc.want)
		}
	}
	if (verbs.Senders{}).Match(&verbs.WC{Src: srv, SrcQP: 0x101}) {
		t.Error("an empty set matched")
	}
}
