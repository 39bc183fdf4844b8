package soft

import (
	"github.com/seqd/seqd/verbs/rocev2"
)

// Frame layout of what an AF_XDP socket receives (xdp=): Ethernet,
// IPv4 without options, UDP, then the transport packet.
const (
	frameEthLen  = 14
	frameHdrsLen = frameEthLen + rocev2.IPv4HeaderLen + rocev2.UDPHeaderLen
)

// frameHdr is what parseFrame reads from the headers of a frame.
type frameHdr struct {
	src, dst     [4]byte
	sport, dport uint16
	id           uint16 // IPv4 identification
	flagsFrag    uint16 // IPv4 flags and fragment offset
	// udpPartial: the UDP checksum holds only the pseudo-header's sum, as
	// a local sender's packet does when the kernel left the rest to a
	// NIC's offload (veth: CHECKSUM_PARTIAL), so it checks nothing.
	udpPartial bool
}

// frameErr is why parseFrame refused a frame.
type frameErr uint8

const (
	frameOK          frameErr = iota
	frameNotRoCE              // not IPv4 (20-byte header) UDP, or a fragment
	frameLength               // the lengths of the frame, IPv4 and UDP disagree
	frameIPChecksum           // wrong IPv4 header checksum
	frameUDPChecksum          // wrong UDP checksum (0, none, passes)
)

// parseFrame checks the Ethernet, IPv4 and UDP headers of frame b and
// returns the UDP payload (the transport packet, BTH through ICRC): the
// IPv4 total length and the UDP length must agree with each other and
// fit in the frame (Ethernet may pad a short frame), the IPv4 header
// checksum must be right, and so must the UDP checksum where there is
// one (not 0). It neither allocates nor panics, whatever b holds.
func parseFrame(b []byte, h *frameHdr) ([]byte, frameErr) {
	if len(b) < frameHdrsLen {
		return nil, frameLength
	}
	ip := b[frameEthLen:]
	if b[12] != 0x08 || b[13] != 0x00 || ip[0] != 0x45 || ip[9] != 17 {
		return nil, frameNotRoCE
	}
	ff := be16(ip[6:])
	if ff&0x3fff != 0 { // MF or a fragment offset
		return nil, frameNotRoCE
	}
	tot := int(be16(ip[2:]))
	if tot < rocev2.IPv4HeaderLen+rocev2.UDPHeaderLen || tot > len(ip) {
		return nil, frameLength
	}
	ip = ip[:tot]
	udp := ip[rocev2.IPv4HeaderLen:]
	if int(be16(udp[4:])) != len(udp) {
		return nil, frameLength
	}
	if fold(sum16(ip[:rocev2.IPv4HeaderLen], 0)) != 0xffff {
		return nil, frameIPChecksum
	}
	h.udpPartial = false
	if ck := be16(udp[6:]); ck != 0 {
		// The pseudo-header: addresses, protocol, UDP length.
		ps := sum16(ip[12:20], uint64(17)+uint64(len(udp)))
		if fold(sum16(udp, ps)) != 0xffff {
			if p := fold(ps); ck != p && !(p == 0xffff && ck == 0) {
				return nil, frameUDPChecksum
			}
			h.udpPartial = true
		}
	}
	h.src = [4]byte(ip[12:16])
	h.dst = [4]byte(ip[16:20])
	h.id, h.flagsFrag = be16(ip[4:]), ff
	h.sport, h.dport = be16(udp[0:]), be16(udp[2:])
	return udp[rocev2.UDPHeaderLen:], frameOK
}

func be16(b []byte) uint16 {
	_ = b[1]
	return uint16(b[0])<<8 | uint16(b[1])
}

// sum16 adds the big-endian 16-bit words of b (an odd last byte padded
// with a zero) to s, without folding.
func sum16(b []byte, s uint64) uint64 {
	for len(b) >= 8 {
		s += uint64(b[0])<<8 | uint64(b[1]) + (uint64(b[2])<<8 | uint64(b[3])) +
			(uint64(b[4])<<8 | uint64(b[5])) + (uint64(b[6])<<8 | uint64(b[7]))
		b = b[8:]
	}
	for len(b) >= 2 {
		s += uint64(b[0])<<8 | uint64(b[1])
		b = b[2:]
	}
	if len(b) == 1 {
		s += uint64(b[0]) << 8
	}
	return s
}

// fold folds a one's-complement sum to 16 bits.
func fold(s uint64) uint16 {
	for s > 0xffff {
		s = s>>16 + s&0xffff
	}
	return uint16(s)
}

// frameICRCOK reports whether got is the ICRC of a packet whose ICRC for
// IPv4 ID 0 (and DF) is sum0, when the IPv4 header carries id: the ID's
// term comes from ids, set for the packet's length, with next and
// nextTerm predicting a run of consecutive IDs. Unlike the socket path,
// nothing is searched for: the header is at hand.
func frameICRCOK(ids *rocev2.IDTerms, next *uint16, nextTerm *uint32, sum0, got uint32, id uint16) bool {
	if id == 0 {
		return sum0 == got
	}
	term := *nextTerm
	if id != *next {
		term = ids.Term(id)
	}
	*next, *nextTerm = id+1, ids.Next(id, term)
	return sum0^term == got
}
