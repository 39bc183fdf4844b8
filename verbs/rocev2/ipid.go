package rocev2

import (
	"encoding/binary"
	"math/bits"
)

// The ICRC covers the IPv4 Identification field (rxe_icrc.c masks only
// TOS, TTL and the header checksum). A UDP socket never sees the ID of a
// datagram it receives, and a sender that lets the kernel or the NIC cut a
// GSO run into segments does not choose the IDs those segments carry
// (inet_gso_segment numbers them base, base+1, ...). CRC-32 is affine in
// the message bits: for packets of one length on one flow, the ICRC with
// ID id is the ICRC with ID 0 XOR a linear function L(id) of the 16 ID
// bits. L is injective (CRC-32 detects every error burst of up to 32
// bits), so a receiver can recover the ID from the difference and a
// sender can move an ICRC from one ID to another with a few XORs.

// crcPoly is the reflected CRC-32 (IEEE) polynomial.
const crcPoly = 0xedb88320

// multModP returns a*b modulo the CRC-32 polynomial, both in the
// reflected representation (zlib's multmodp).
func multModP(a, b uint32) uint32 {
	m := uint32(1) << 31
	var p uint32
	for {
		if a&m != 0 {
			p ^= b
			if a&(m-1) == 0 {
				break
			}
		}
		m >>= 1
		if b&1 != 0 {
			b = b>>1 ^ crcPoly
		} else {
			b >>= 1
		}
	}
	return p
}

// x2nTable[k] is x^(2^k) modulo the polynomial.
var x2nTable = func() (t [32]uint32) {
	p := uint32(1) << 30 // x^1
	for k := range t {
		t[k] = p
		p = multModP(p, p)
	}
	return t
}()

// shiftBytes returns the CRC register c moved past n zero bytes (without
// the init and final XOR): multiplication by x^(8n).
func shiftBytes(c uint32, n int) uint32 {
	p := uint32(1) << 31 // x^0
	k := 3
	for u := uint64(n); u != 0; u >>= 1 {
		if u&1 != 0 {
			p = multModP(x2nTable[k&31], p)
		}
		k++
	}
	return multModP(p, c)
}

// bitTerm is what bit j of a byte of the ICRC's input XORs into the CRC
// register when after more bytes follow it (CRC-32 is affine in its
// input bits).
func bitTerm(j, after int) uint32 { return shiftBytes(crcTables[0][1<<j], after) }

// idOffset is where the IPv4 ID sits in the ICRC's input: after eight
// bytes of ones and four bytes of the IPv4 header.
const idOffset = 8 + 4

// IDTerms is the ID part of the ICRC for transport packets of one length:
// L(id) as a basis of 16 terms, one per ID bit, and a reduced form of it
// that recovers id from L(id). The zero value is unset; Set fills it.
type IDTerms struct {
	n     int // packet length (BTH through ICRC) it is for; 0: unset
	basis [16]uint32
	low   [17]uint32 // low[j]: basis[0] ^ ... ^ basis[j-1], for Next
	rows  [16]idRow
}

type idRow struct {
	pivot uint32 // one bit
	vec   uint32
	id    uint16
}

// Len returns the packet length t was set for, 0 if none.
func (t *IDTerms) Len() int { return t.n }

// Set computes the terms for transport packets of n bytes (BTH through
// ICRC).
func (t *IDTerms) Set(n int) {
	t.n = n
	// Bytes of ICRC input after the ID's low byte.
	after := pseudoLen + n - ICRCLen - idOffset - 2
	for k := 0; k < 16; k++ {
		var c uint32
		if k < 8 {
			c = bitTerm(k, after) // low byte, bit k
		} else {
			c = bitTerm(k-8, after+1) // high byte
		}
		t.basis[k] = c
		t.low[k+1] = t.low[k] ^ c
	}
	// Gaussian elimination: each row gets a pivot bit no other row has.
	var rows [16]idRow
	for k := range rows {
		rows[k] = idRow{vec: t.basis[k], id: 1 << k}
	}
	for i := range rows {
		v := rows[i].vec
		if v == 0 {
			continue // impossible: L is injective
		}
		piv := v & -v
		rows[i].pivot = piv
		for j := range rows {
			if j != i && rows[j].vec&piv != 0 {
				rows[j].vec ^= v
				rows[j].id ^= rows[i].id
			}
		}
	}
	t.rows = rows
}

// Term returns L(id): what an ID of id XORs into the ICRC of a packet
// computed for ID 0.
func (t *IDTerms) Term(id uint16) uint32 {
	var c uint32
	for k := 0; id != 0; k++ {
		if id&1 != 0 {
			c ^= t.basis[k]
		}
		id >>= 1
	}
	return c
}

// Next returns L(id+1) given term = L(id), in constant time: a receiver
// that predicts consecutive IDs (the segments of one GSO send carry them)
// checks each packet with one XOR instead of Solve. id+1 differs from id
// in its trailing ones and the zero above them.
func (t *IDTerms) Next(id uint16, term uint32) uint32 {
	return term ^ t.low[min(bits.TrailingZeros16(^id)+1, 16)] // 0xffff wraps to 0
}

// Solve returns the ID for which a packet whose ICRC for ID 0 is sum0
// carries the ICRC got, or false when no ID explains the difference (the
// packet is corrupt). A corrupt packet passes with probability 2^-16
// instead of 2^-32: the price of not seeing the ID.
func (t *IDTerms) Solve(sum0, got uint32) (uint16, bool) {
	d := sum0 ^ got
	var id uint16
	for i := range t.rows {
		r := &t.rows[i]
		if d&r.pivot != 0 {
			d ^= r.vec
			id ^= r.id
		}
	}
	return id, d == 0
}

// VerifyICRCAnyID reports whether the ICRC stored in pkt is right for
// flow f with some IPv4 ID (f.ID is ignored), and which: what a receiver
// that cannot see the ID checks. It computes the terms for len(pkt) each
// call; a receive path keeps an IDTerms per length instead.
func VerifyICRCAnyID(f *Flow, pkt []byte) (uint16, bool) {
	if len(pkt) < BTHLen+ICRCLen {
		return 0, false
	}
	g := *f
	g.ID = 0
	var t IDTerms
	t.Set(len(pkt))
	return t.Solve(ICRC(&g, pkt), binary.LittleEndian.Uint32(pkt[len(pkt)-ICRCLen:]))
}
