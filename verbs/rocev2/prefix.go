package rocev2

import "math/bits"

// A receiver that sees a new sender on every packet (many clients, one
// packet each in flight) computes a Flow's Prefix per packet: CRC-32 over
// the 36-byte masked pseudo-header, about 36 table lookups in 8 KiB of
// tables. With the destination, the length and the IPv4 fields fixed, the
// prefix is affine in the six bytes that change, the source address and
// port (see ipid.go): a PrefixTable keeps one 256-entry term table per
// byte, and a prefix is six lookups and six XORs.

// srcOffset and sportOffset are where the IPv4 source address and the UDP
// source port sit in the ICRC's input: after eight bytes of ones, and 12
// (20) bytes into the IPv4 header.
const (
	srcOffset   = 8 + 12
	sportOffset = 8 + IPv4HeaderLen
)

// PrefixTable gives Flow.Prefix for flows that differ only in Src and
// SrcPort. The zero value is unset; Set fills it.
type PrefixTable struct {
	base  Flow // Src and SrcPort zero
	n     int
	zero  uint32         // the prefix for base
	terms [6][256]uint32 // what byte value b at source byte k XORs in: k 0-3 the address, 4-5 the port
}

// Set builds the table for transport packets of n bytes (BTH through
// ICRC) on flows like f (its Src and SrcPort are ignored).
func (t *PrefixTable) Set(f Flow, n int) {
	f.Src, f.SrcPort = [4]byte{}, 0
	t.base, t.n = f, n
	t.zero = f.Prefix(n)
	for k := range t.terms {
		pos := srcOffset + k
		if k >= 4 {
			pos = sportOffset + k - 4
		}
		after := pseudoLen - 1 - pos // bytes of the prefix after this one
		var bit [8]uint32
		for j := range bit {
			bit[j] = bitTerm(j, after)
		}
		for b := 1; b < 256; b++ { // b's lowest set bit, then the rest
			t.terms[k][b] = bit[bits.TrailingZeros(uint(b))] ^ t.terms[k][b&(b-1)]
		}
	}
}

// Len returns the packet length t was set for, 0 if none.
func (t *PrefixTable) Len() int { return t.n }

// For reports whether t gives the prefixes of n-byte packets to
// dst:dport, on flows whose other IPv4 fields are those t was set for.
// It takes the fields, not a Flow: a Flow just built field by field and
// read whole stalls on store forwarding, once per packet on a receiver's
// path.
func (t *PrefixTable) For(dst [4]byte, dport uint16, n int) bool {
	return t.n == n && t.base.Dst == dst && t.base.DstPort == dport
}

// Prefix returns the Prefix, for the table's length, of the table's flow
// from src:sport.
func (t *PrefixTable) Prefix(src [4]byte, sport uint16) uint32 {
	return t.zero ^ t.terms[0][src[0]] ^ t.terms[1][src[1]] ^ t.terms[2][src[2]] ^ t.terms[3][src[3]] ^
		t.terms[4][sport>>8] ^ t.terms[5][sport&0xff]
}
