package rocev2

import (
	"encoding/binary"
	"math/bits"
)

// patchMax is the longest packet body (BTH through payload, without the
// ICRC) a Patcher handles incrementally.
const patchMax = 64

// crcShift[j][v] is the change a byte difference v makes to a CRC when j
// bytes follow it: CRC-32 is linear, so the CRCs of two equal-length
// messages differ by the XOR of these terms over the bytes where the
// messages differ.
var crcShift = func() (t [patchMax][256]uint32) {
	for v := 0; v < 256; v++ {
		t[0][v] = crcTables[0][v]
		for j := 1; j < patchMax; j++ {
			c := t[j-1][v]
			t[j][v] = crcTables[0][c&0xff] ^ c>>8
		}
	}
	return t
}()

// A Patcher computes the ICRCs of a stream of equal-length packets on one
// flow incrementally: it keeps the previous packet and its ICRC, and
// patches in the contribution of each byte that changed (a PSN, an
// immediate, a QPN) instead of hashing the whole packet. A different
// length or prefix, or a body longer than 64 bytes, falls back to the full
// computation, which becomes the new reference. The zero value is ready;
// a Patcher is not safe for concurrent use. TestPatcherMatchesFull checks
// it against ICRCFrom.
type Patcher struct {
	n      int // body length of the reference; 0: none
	prefix uint32
	crc    uint32
	ref    [patchMax]byte
}

// ICRC returns the ICRC of pkt (BTH through the ICRC field) whose masked
// prefix (Flow.Prefix) is prefix.
func (p *Patcher) ICRC(prefix uint32, pkt []byte) uint32 {
	n := len(pkt) - ICRCLen
	if n < BTHLen || n > patchMax || n != p.n || prefix != p.prefix {
		return p.reset(prefix, pkt)
	}
	body := pkt[:n]
	crc := p.crc
	w := 0
	for ; w+8 <= n; w += 8 {
		d := binary.LittleEndian.Uint64(body[w:]) ^ binary.LittleEndian.Uint64(p.ref[w:])
		if w == 0 {
			d &^= 0xff << 32 // BTH byte 4 is masked to ones in the ICRC
		}
		for d != 0 {
			b := bits.TrailingZeros64(d) >> 3
			crc ^= crcShift[n-1-(w+b)][byte(d>>(b<<3))]
			d &^= 0xff << (b << 3)
		}
	}
	for ; w < n; w++ {
		if x := body[w] ^ p.ref[w]; x != 0 {
			crc ^= crcShift[n-1-w][x]
		}
	}
	copy(p.ref[:n], body)
	p.ref[4] = 0xff
	p.crc = crc
	return crc
}

func (p *Patcher) reset(prefix uint32, pkt []byte) uint32 {
	crc := ICRCFrom(prefix, pkt)
	n := len(pkt) - ICRCLen
	if n < BTHLen || n > patchMax {
		p.n = 0
		return crc
	}
	p.n, p.prefix, p.crc = n, prefix, crc
	copy(p.ref[:n], pkt[:n])
	p.ref[4] = 0xff
	return crc
}
