package verbs_test

import (
	"net/netip"
	"testing"

	"github.com/seqd/seqd/verbs"
)

func TestSendersMatch(t *testing.T) {
	ip := verbs.GIDFromAddr(netip.MustParseAddr("127.0.0.1"))
	soft := verbs.Address{GID: ip, LID: 3, Port: 5000} // a soft device with a port per queue
	nic := verbs.Address{GID: verbs.GIDFromAddr(netip.MustParseAddr("192.0.2.1"))}
	on4791 := verbs.Address{GID: verbs.GIDFromAddr(netip.MustParseAddr("192.0.2.2")), Port: verbs.RoCEv2Port}
	s := verbs.Senders{verbs.SenderOf(soft, 0x101), verbs.SenderOf(soft, 0x102), verbs.SenderOf(nic, 0x200),
		verbs.SenderOf(on4791, 0x300)}
	at := func(a verbs.Address, port uint16) verbs.Address { a.Port = port; return a }
	otherIP := soft
	otherIP.GID = verbs.GIDFromAddr(netip.MustParseAddr("127.0.0.2"))
	noLID := soft
	noLID.LID = 0
	for _, tc := range []struct {
		name string
		src  verbs.Address
		qpn  verbs.QPN
		want bool
	}{
		{"a response QP", soft, 0x102, true},
		{"the LID plays no part", noLID, 0x101, true},
		{"another QPN", soft, 0x103, false},
		{"another port of a soft device", at(soft, 5001), 0x101, false},
		{"another address", otherIP, 0x101, false},
		{"a NIC's random source port", at(nic, 0xc123), 0x200, true},
		{"a NIC seen by a NIC (no port)", at(nic, 0), 0x200, true},
		{"a NIC, another QPN", at(nic, 0xc123), 0x201, false},
		{"registered on 4791, sending from 4791", on4791, 0x300, true},
		{"registered on 4791, sending from elsewhere", at(on4791, 0xd000), 0x300, true},
		{"a soft device's own port, seen by a NIC (no port)", at(soft, 0), 0x101, true},
	} {
		wc := verbs.WC{SrcQP: tc.qpn, Src: tc.src}
		if got := s.Match(&wc); got != tc.want {
			t.Errorf("%s: Match = %v, want %v", tc.name, got, tc.want)
		}
		// A map of registered senders finds the same ones.
		m := map[verbs.Sender]bool{}
		for _, x := range s {
			m[x] = true
		}
		// A map of senders keyed for the receiver: a NIC receiver (port
		// 0 in its completions) keys them without ports.
		if tc.src.Port == 0 {
			m = map[verbs.Sender]bool{}
			for _, a := range []struct {
				a verbs.Address
				q verbs.QPN
			}{{soft, 0x101}, {soft, 0x102}, {nic, 0x200}, {on4791, 0x300}} {
				m[verbs.SenderFor(a.a, a.q, false)] = true
			}
		}
		exact, anyPort := verbs.SenderKeys(&wc)
		if got := m[exact] || m[anyPort]; got != tc.want {
			t.Errorf("%s: SenderKeys lookup = %v, want %v", tc.name, got, tc.want)
		}
	}
	if (verbs.Senders{}).Match(&verbs.WC{Src: soft, SrcQP: 0x101}) {
		t.Error("an empty set matched")
	}
}
