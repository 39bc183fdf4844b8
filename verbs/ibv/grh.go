package ibv

import (
	"encoding/binary"

	"github.com/seqd/seqd/verbs"
)

// grhSource returns the sender's GID from the 40-byte GRH area at the start
// of a UD receive buffer. For RoCE v2 over IPv4 the NIC writes the IPv4
// header into the last 20 bytes of the area and leaves the first 20
// undefined; otherwise the area is a real GRH (IB, RoCE v1, RoCE v2 over
// IPv6) with the SGID at offset 8. The two are told apart as rdma-core's
// ibv_init_ah_from_wc does: an IPv6 version nibble in byte 0 means a GRH
// unless bytes 20..39 are a valid 20-byte IPv4 header (checksum included).
func grhSource(grh []byte) (verbs.GID, bool) {
	var g verbs.GID
	if len(grh) < verbs.GRHLen {
		return g, false
	}
	ip4 := grh[20:40]
	switch {
	case grh[0]>>4 != 6:
		if ip4[0]>>4 != 4 {
			return g, false
		}
	case !isIPv4Header(ip4):
		copy(g[:], grh[8:24])
		return g, true
	}
	// IPv4-mapped source address: ::ffff:a.b.c.d.
	g[10], g[11] = 0xff, 0xff
	copy(g[12:], ip4[12:16])
	return g, true
}

// isIPv4Header reports whether b starts with an option-less IPv4 header
// whose checksum is right.
func isIPv4Header(b []byte) bool {
	if len(b) < 20 || b[0] != 0x45 {
		return false
	}
	var sum uint32
	for i := 0; i < 20; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	return sum == 0xffff
}

// maxGRHSGE bounds the SGEs a receive's GRH may be spread over.
const maxGRHSGE = 4

// grhSGEs returns the SGEs of sg that hold its first 40 bytes, cut to
// them, and their number; 0 when sg holds less or needs more than
// maxGRHSGE of them.
func grhSGEs(sg []verbs.SGE) (out [maxGRHSGE]verbs.SGE, n uint8) {
	need := uint32(verbs.GRHLen)
	for _, s := range sg {
		if s.Length == 0 {
			continue
		}
		if n == maxGRHSGE {
			return out, 0
		}
		s.Length = min(s.Length, need)
		out[n] = s
		n++
		if need -= s.Length; need == 0 {
			return out, n
		}
	}
	return out, 0
}
