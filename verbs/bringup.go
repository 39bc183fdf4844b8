package verbs

import (
	"crypto/rand"
	"encoding/binary"
	"slices"
)

// Helpers for the usual bring-up sequences. They use only Modify, so they
// work on every provider.

// DefaultQKey is a Q_Key for UD queue pairs whose users do not choose one.
const DefaultQKey = 0x11111111

// BringUpUD moves a UD queue pair from RESET to RTS with the given Q_Key
// and send PSN.
func BringUpUD(qp QP, qkey uint32, sqpsn PSN) error {
	if err := qp.Modify(&QPAttr{State: StateInit, PortNum: 1, QKey: qkey},
		AttrState|AttrPKeyIndex|AttrPort|AttrQKey); err != nil {
		return err
	}
	if err := qp.Modify(&QPAttr{State: StateRTR}, AttrState); err != nil {
		return err
	}
	return qp.Modify(&QPAttr{State: StateRTS, SQPSN: sqpsn}, AttrState|AttrSQPSN)
}

// ConnectAttr describe the remote end of a connected (UC or RC) QP.
type ConnectAttr struct {
	Remote    Address
	RemoteQPN QPN
	RQPSN     PSN // the first PSN the remote will send
	SQPSN     PSN // the first PSN this QP sends
	MTU       MTU // 0 means MTU1024
	Access    Access
	// RC only; zero values get sensible defaults.
	Timeout  uint8 // 0 means 14 (≈67 ms)
	RetryCnt uint8 // 0 means 7
	RNRRetry uint8 // 0 means 7 (infinite)
	RdAtomic uint8 // 0 means 16
}

// Connect moves a UC or RC queue pair from RESET to RTS, connected to the
// remote QP.
func Connect(qp QP, c ConnectAttr) error {
	if c.MTU == 0 {
		c.MTU = MTU1024
	}
	if err := qp.Modify(&QPAttr{State: StateInit, PortNum: 1, AccessFlags: c.Access},
		AttrState|AttrPKeyIndex|AttrPort|AttrAccessFlags); err != nil {
		return err
	}
	rtr := &QPAttr{State: StateRTR, AH: AHAttr{Dest: c.Remote, PortNum: 1}, PathMTU: c.MTU,
		DestQPN: c.RemoteQPN, RQPSN: c.RQPSN}
	mask := AttrState | AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN
	rts := &QPAttr{State: StateRTS, SQPSN: c.SQPSN}
	rtsMask := AttrState | AttrSQPSN
	if qp.Type() == RC {
		rd := c.RdAtomic
		if rd == 0 {
			rd = 16
		}
		rtr.MaxDestRdAtomic, rtr.MinRNRTimer = rd, 1
		mask |= AttrMaxDestRdAtomic | AttrMinRNRTimer
		rts.Timeout, rts.RetryCnt, rts.RNRRetry, rts.MaxRdAtomic = orDefault(c.Timeout, 14), orDefault(c.RetryCnt, 7), orDefault(c.RNRRetry, 7), rd
		rtsMask |= AttrTimeout | AttrRetryCnt | AttrRNRRetry | AttrMaxQPRdAtomic
	}
	if err := qp.Modify(rtr, mask); err != nil {
		return err
	}
	return qp.Modify(rts, rtsMask)
}

func orDefault(v, d uint8) uint8 {
	if v == 0 {
		return d
	}
	return v
}

// RandomQKey returns a Q_Key from crypto/rand: non-zero, not DefaultQKey,
// with the high bit clear (a set high bit means a controlled Q_Key, which
// a send replaces by the sending QP's own), and none of avoid. It has 31
// random bits.
func RandomQKey(avoid ...uint32) uint32 {
	var b [4]byte
	for {
		rand.Read(b[:]) // never fails (crypto/rand aborts the program instead)
		k := binary.LittleEndian.Uint32(b[:]) &^ 0x80000000
		if k != 0 && k != DefaultQKey && !slices.Contains(avoid, k) {
			return k
		}
	}
}

// RandomPSN returns a PSN from crypto/rand (24 bits): a connection's
// first PSN, so that a forged RC response must also guess the window of
// PSNs in flight.
func RandomPSN() PSN {
	var b [4]byte
	rand.Read(b[:]) // never fails (crypto/rand aborts the program instead)
	return PSN(binary.LittleEndian.Uint32(b[:])) & PSNMask
}
