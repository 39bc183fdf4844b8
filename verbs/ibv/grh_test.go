package ibv

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/seqd/seqd/verbs"
)

// ipv4GRH returns a GRH area as a RoCE v2 NIC writes it for IPv4: 20
// undefined bytes, then the IPv4 header.
func ipv4GRH(src, dst netip.Addr, junk byte) []byte {
	b := make([]byte, verbs.GRHLen)
	for i := range 20 {
		b[i] = junk
	}
	h := b[20:]
	h[0] = 0x45
	binary.BigEndian.PutUint16(h[2:], 20+8+12+16+4)
	h[8] = 64
	h[9] = 17 // UDP
	copy(h[12:16], src.AsSlice())
	copy(h[16:20], dst.AsSlice())
	var sum uint32
	for i := 0; i < 20; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(h[i:]))
	}
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	binary.BigEndian.PutUint16(h[10:], ^uint16(sum))
	return b
}

// realGRH returns an IB/RoCE v1/RoCE v2 IPv6 GRH.
func realGRH(src, dst verbs.GID) []byte {
	b := make([]byte, verbs.GRHLen)
	binary.BigEndian.PutUint32(b, 6<<28)
	b[6] = 0x1b // next header
	b[7] = 64
	copy(b[8:24], src[:])
	copy(b[24:40], dst[:])
	return b
}

func TestGRHSource(t *testing.T) {
	src4, dst4 := netip.MustParseAddr("10.1.2.3"), netip.MustParseAddr("10.1.2.4")
	src6 := verbs.GIDFromAddr(netip.MustParseAddr("2001:db8::5"))
	dst6 := verbs.GIDFromAddr(netip.MustParseAddr("2001:db8::6"))
	badSum := ipv4GRH(src4, dst4, 0x60)
	badSum[30] ^= 0xff
	tests := []struct {
		name string
		grh  []byte
		want verbs.GID
		ok   bool
	}{
		{"IPv4", ipv4GRH(src4, dst4, 0), verbs.GIDFromAddr(src4), true},
		// Bytes 0..19 are undefined: an IPv6 version nibble there must
		// not hide a valid IPv4 header.
		{"IPv4JunkLooksLikeV6", ipv4GRH(src4, dst4, 0x60), verbs.GIDFromAddr(src4), true},
		{"IPv6", realGRH(src6, dst6), src6, true},
		{"IPv4Mapped GRH", realGRH(verbs.GIDFromAddr(src4), verbs.GIDFromAddr(dst4)), verbs.GIDFromAddr(src4), true},
		{"V6NibbleBadIPv4Sum", badSum, verbs.GID(badSum[8:24]), true},
		{"Zeros", make([]byte, verbs.GRHLen), verbs.GID{}, false},
		{"Short", ipv4GRH(src4, dst4, 0)[:39], verbs.GID{}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := grhSource(tc.grh)
			if ok != tc.ok || (ok && got != tc.want) {
				t.Fatalf("grhSource = %v, %v; want %v, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

func FuzzGRHSource(f *testing.F) {
	f.Add(ipv4GRH(netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"), 0))
	f.Add(realGRH(verbs.GID{1}, verbs.GID{2}))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		g, ok := grhSource(b)
		if !ok && g != (verbs.GID{}) {
			t.Fatalf("not ok but GID %v", g)
		}
		if ok && len(b) < verbs.GRHLen {
			t.Fatalf("ok on %d bytes", len(b))
		}
	})
}
