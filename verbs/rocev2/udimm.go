package rocev2

import (
	"encoding/binary"
	"math/bits"
)

// UDImmLen is the length of a header-only UD SEND_WITH_IMM (the
// sequencer's packet): BTH, DETH, ImmDt and the ICRC, no payload.
const UDImmLen = BTHLen + DETHLen + ImmDtLen + ICRCLen

// udImmBody is the part of a UDImmLen packet the ICRC covers after the
// prefix: everything but the ICRC field.
const udImmBody = UDImmLen - ICRCLen

// ParseUDImm decodes a header-only UD SEND_WITH_IMM without the general
// decoder, or reports false for any other packet (another opcode or
// length, a pad count, a transport version). It does not check the ICRC.
func ParseUDImm(b []byte, p *Packet) bool {
	if len(b) != UDImmLen || b[0] != byte(UDSendOnlyWithImm) || b[1]&0x3f != 0 {
		return false
	}
	p.Opcode = UDSendOnlyWithImm
	p.SE = b[1]&0x80 != 0
	p.PKey = binary.BigEndian.Uint16(b[2:])
	p.DestQP = binary.BigEndian.Uint32(b[4:]) & 0xffffff
	p.PSN = binary.BigEndian.Uint32(b[8:]) & 0xffffff
	p.QKey = binary.BigEndian.Uint32(b[12:])
	p.SrcQP = binary.BigEndian.Uint32(b[16:]) & 0xffffff
	p.Imm = binary.BigEndian.Uint32(b[20:])
	return true
}

// udImmWords are the BTH, DETH and ImmDt of a header-only UD
// SEND_WITH_IMM with the default P_Key and no flags, as three big-endian
// words.
func udImmWords(destQP, psn, qkey, srcQP, imm uint32) (w0, w1, w2 uint64) {
	w0 = uint64(UDSendOnlyWithImm)<<56 | uint64(DefaultPKey)<<32 | uint64(destQP&0xffffff)
	w1 = uint64(psn&0xffffff)<<32 | uint64(qkey)
	w2 = uint64(srcQP&0xffffff)<<32 | uint64(imm)
	return
}

// udImmTab holds, for each of the seven bytes that change from one
// header-only packet to the next on a flow (the PSN, BTH bytes 9-11, and
// the immediate, bytes 20-23), the CRC contribution of each value.
var udImmTab = func() (t [7][256]uint32) {
	for i, pos := range [7]int{9, 10, 11, 20, 21, 22, 23} {
		t[i] = crcShift[udImmBody-1-pos]
	}
	return t
}()

// A UDImmICRC computes the ICRCs of header-only UD SEND_WITH_IMMs that
// differ only in PSN and immediate (one sender's stream to one
// destination QP, or one destination's stream from one source QP). CRC-32
// is linear: it keeps the ICRC of the packet with both fields zero and
// adds the contributions of their seven bytes, seven table lookups in
// all. Any other change (a new flow, Q_Key, QPN, P_Key or flags)
// recomputes the base. The zero value is ready; it is not safe for
// concurrent use. TestUDImmICRC checks it against ICRCFrom.
type UDImmICRC struct {
	ok     bool
	prefix uint32
	key    [3]uint64
	base   uint32
}

// ICRC returns the ICRC of pkt, a UDImmLen-byte header-only UD
// SEND_WITH_IMM whose masked prefix (Flow.Prefix(UDImmLen)) is prefix.
// The ICRC field's content is ignored.
func (u *UDImmICRC) ICRC(prefix uint32, pkt []byte) uint32 {
	_ = pkt[UDImmLen-1]
	return u.sum(prefix, binary.LittleEndian.Uint64(pkt), binary.LittleEndian.Uint64(pkt[8:]),
		binary.LittleEndian.Uint64(pkt[16:]))
}

// Put writes a header-only UD SEND_WITH_IMM with the default P_Key and no
// flags into b[:UDImmLen], ICRC included, for a flow whose masked prefix
// is prefix. It computes the ICRC from the fields, not by reading the
// packet back.
func (u *UDImmICRC) Put(b []byte, prefix uint32, destQP, psn, qkey, srcQP, imm uint32) {
	_ = b[UDImmLen-1]
	w0, w1, w2 := udImmWords(destQP, psn, qkey, srcQP, imm)
	binary.BigEndian.PutUint64(b, w0)
	binary.BigEndian.PutUint64(b[8:], w1)
	binary.BigEndian.PutUint64(b[16:], w2)
	binary.LittleEndian.PutUint32(b[udImmBody:], u.sum(prefix, bits.ReverseBytes64(w0), bits.ReverseBytes64(w1),
		bits.ReverseBytes64(w2)))
}

// sum is the ICRC of the packet whose first 24 bytes, read little-endian,
// are l0, l1, l2.
func (u *UDImmICRC) sum(prefix uint32, l0, l1, l2 uint64) uint32 {
	k0 := l0 | 0xff<<32         // BTH byte 4 is masked
	k1 := l1 &^ (0xffffff << 8) // without the PSN
	k2 := l2 & 0xffffffff       // without the immediate
	if !u.ok || prefix != u.prefix || k0 != u.key[0] || k1 != u.key[1] || k2 != u.key[2] {
		var z [UDImmLen]byte
		binary.LittleEndian.PutUint64(z[:], k0)
		binary.LittleEndian.PutUint64(z[8:], k1)
		binary.LittleEndian.PutUint64(z[16:], k2)
		u.ok, u.prefix, u.key, u.base = true, prefix, [3]uint64{k0, k1, k2}, ICRCFrom(prefix, z[:])
	}
	t := &udImmTab
	return u.base ^ t[0][byte(l1>>8)] ^ t[1][byte(l1>>16)] ^ t[2][byte(l1>>24)] ^
		t[3][byte(l2>>32)] ^ t[4][byte(l2>>40)] ^ t[5][byte(l2>>48)] ^ t[6][byte(l2>>56)]
}
