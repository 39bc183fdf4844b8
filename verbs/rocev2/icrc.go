package rocev2

import (
	"encoding/binary"
)

// Flow is what the ICRC covers outside the transport headers: the IPv4 and
// UDP headers of a packet, with the fields the ICRC masks left out.
type Flow struct {
	Src, Dst   [4]byte
	SrcPort    uint16
	DstPort    uint16
	ID         uint16 // IPv4 identification
	FlagsFrag  uint16 // IPv4 flags and fragment offset (0x4000: DF)
	IHLVersion uint8  // 0x45 for a 20-byte header; 0 means 0x45
}

// IPv4HeaderLen and UDPHeaderLen are the header sizes this codec builds.
const (
	IPv4HeaderLen = 20
	UDPHeaderLen  = 8
	ipProtoUDP    = 17
)

// pseudoLen is the masked prefix the ICRC starts with: 8 bytes of ones
// standing in for the LRH, the IPv4 header and the UDP header.
const pseudoLen = 8 + IPv4HeaderLen + UDPHeaderLen

// putPseudo writes the masked ICRC prefix for a transport packet of
// length n (BTH through ICRC).
func (f *Flow) putPseudo(b *[pseudoLen + BTHLen]byte, n int) {
	for i := 0; i < 8; i++ {
		b[i] = 0xff
	}
	ip := b[8:]
	ip[0] = f.IHLVersion
	if ip[0] == 0 {
		ip[0] = 0x45
	}
	ip[1] = 0xff // TOS
	binary.BigEndian.PutUint16(ip[2:], uint16(IPv4HeaderLen+UDPHeaderLen+n))
	binary.BigEndian.PutUint16(ip[4:], f.ID)
	binary.BigEndian.PutUint16(ip[6:], f.FlagsFrag)
	ip[8] = 0xff // TTL
	ip[9] = ipProtoUDP
	ip[10], ip[11] = 0xff, 0xff // header checksum
	copy(ip[12:], f.Src[:])
	copy(ip[16:], f.Dst[:])
	udp := ip[IPv4HeaderLen:]
	binary.BigEndian.PutUint16(udp[0:], f.SrcPort)
	binary.BigEndian.PutUint16(udp[2:], f.DstPort)
	binary.BigEndian.PutUint16(udp[4:], uint16(UDPHeaderLen+n))
	udp[6], udp[7] = 0xff, 0xff // UDP checksum
}

// ICRC computes the invariant CRC of a transport packet pkt (BTH through
// the ICRC field, whose content is ignored) sent on flow f: CRC-32 over
// eight bytes of ones, the IPv4 and UDP headers and the transport packet,
// with IPv4 TOS, TTL and checksum, the UDP checksum and BTH byte 4 set to
// ones (IBTA RoCEv2 annex; Linux rxe_icrc.c). It does not allocate.
func ICRC(f *Flow, pkt []byte) uint32 {
	if len(pkt) < BTHLen+ICRCLen {
		return 0
	}
	var b [pseudoLen + BTHLen]byte
	f.putPseudo(&b, len(pkt))
	copy(b[pseudoLen:], pkt[:BTHLen])
	b[pseudoLen+4] = 0xff // FECN, BECN, reserved
	return crcUpdate(crcUpdate(0, b[:]), pkt[BTHLen:len(pkt)-ICRCLen])
}

// PutICRC computes the ICRC of pkt and stores it in its last four bytes,
// least-significant byte first, as it sits on the wire.
func PutICRC(f *Flow, pkt []byte) {
	if len(pkt) < BTHLen+ICRCLen {
		return
	}
	binary.LittleEndian.PutUint32(pkt[len(pkt)-ICRCLen:], ICRC(f, pkt))
}

// VerifyICRC reports whether the ICRC stored in pkt is right for flow f.
func VerifyICRC(f *Flow, pkt []byte) bool {
	if len(pkt) < BTHLen+ICRCLen {
		return false
	}
	return binary.LittleEndian.Uint32(pkt[len(pkt)-ICRCLen:]) == ICRC(f, pkt)
}

// Prefix is the ICRC state after the masked IPv4 and UDP headers of a
// packet of n bytes (BTH through ICRC) on flow f. A sender that emits many
// packets of one size on one flow computes it once and finishes each
// packet's ICRC with ICRCFrom, hashing only the transport headers and
// payload.
func (f *Flow) Prefix(n int) uint32 {
	var b [pseudoLen + BTHLen]byte
	f.putPseudo(&b, n)
	return crcUpdate(0, b[:pseudoLen])
}

const shortLen = 64

// ICRCFrom finishes the ICRC of pkt from a Prefix computed for len(pkt).
func ICRCFrom(prefix uint32, pkt []byte) uint32 {
	if len(pkt) < BTHLen+ICRCLen {
		return 0
	}
	body := pkt[:len(pkt)-ICRCLen]
	if len(body) <= shortLen {
		// Header-only and small packets: one pass over a masked copy, so
		// the slicing-by-8 loop runs without a byte-wise remainder in the
		// middle.
		var b [shortLen]byte
		copy(b[:], body)
		b[4] = 0xff
		return crcUpdate(prefix, b[:len(body)])
	}
	var bth [BTHLen]byte
	copy(bth[:], pkt)
	bth[4] = 0xff
	return crcUpdate(crcUpdate(prefix, bth[:]), body[BTHLen:])
}
