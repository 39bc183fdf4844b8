package rocev2

import "encoding/binary"

// UDImmLen is the length of a header-only UD SEND_WITH_IMM (the
// sequencer's packet): BTH, DETH, ImmDt and the ICRC, no payload.
const UDImmLen = BTHLen + DETHLen + ImmDtLen + ICRCLen

// udImmBody is the part of a UDImmLen packet the ICRC covers after the
// prefix: everything but the ICRC field.
const udImmBody = UDImmLen - ICRCLen

// udImmRows are the crcShift rows of the bytes that change from one
// header-only packet to the next on a flow: the PSN (BTH bytes 9-11) and
// the immediate (bytes 20-23).
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
	k0 := binary.LittleEndian.Uint64(pkt) | 0xff<<32 // BTH byte 4 is masked
	k1 := binary.LittleEndian.Uint64(pkt[8:]) &^ (0xffffff << 8)
	k2 := uint64(binary.LittleEndian.Uint32(pkt[16:]))
	if !u.ok || prefix != u.prefix || k0 != u.key[0] || k1 != u.key[1] || k2 != u.key[2] {
		var z [UDImmLen]byte
		copy(z[:16], pkt)
		z[9], z[10], z[11] = 0, 0, 0
		copy(z[16:20], pkt[16:])
		u.ok, u.prefix, u.key, u.base = true, prefix, [3]uint64{k0, k1, k2}, ICRCFrom(prefix, z[:])
	}
	t := &udImmTab
	return u.base ^ t[0][pkt[9]] ^ t[1][pkt[10]] ^ t[2][pkt[11]] ^
		t[3][pkt[20]] ^ t[4][pkt[21]] ^ t[5][pkt[22]] ^ t[6][pkt[23]]
}
