package verbstest

import (
	"errors"
	"testing"

	"github.com/seqd/seqd/verbs"
)

// badSend makes a bad send WR for a UD queue pair x sending to y.
type badSend struct {
	name string
	wr   func(t *testing.T, x *End, ah verbs.AH, y *End) verbs.SendWR
}

func badSends() []badSend {
	good := func(x *End, ah verbs.AH, y *End) verbs.SendWR {
		return udWR(x, ah, y, 2, verbs.OpSend, 0, 16)
	}
	return []badSend{
		{"BadLKey", func(t *testing.T, x *End, ah verbs.AH, y *End) verbs.SendWR {
			wr := good(x, ah, y)
			wr.SG[0].LKey ^= 0x5a5a5a5a
			return wr
		}},
		{"BeyondMR", func(t *testing.T, x *End, ah verbs.AH, y *End) verbs.SendWR {
			wr := good(x, ah, y)
			wr.SG = SG(x.MR, MRLen-10, 100)
			return wr
		}},
		{"BelowMR", func(t *testing.T, x *End, ah verbs.AH, y *End) verbs.SendWR {
			wr := good(x, ah, y)
			wr.SG[0].Addr = x.MR.Addr() - 16
			return wr
		}},
		{"HugeLength", func(t *testing.T, x *End, ah verbs.AH, y *End) verbs.SendWR {
			wr := good(x, ah, y)
			wr.SG[0].Length = 1<<32 - 1
			return wr
		}},
		{"NilAH", func(t *testing.T, x *End, ah verbs.AH, y *End) verbs.SendWR {
			wr := good(x, ah, y)
			wr.AH = nil
			return wr
		}},
		{"TooManySGEs", func(t *testing.T, x *End, ah verbs.AH, y *End) verbs.SendWR {
			n := x.Dev.Attr().MaxSGE + 1
			if n > 4096 {
				t.Skipf("device allows %d SGEs", n-1)
			}
			wr := good(x, ah, y)
			wr.SG = make([]verbs.SGE, n)
			for i := range wr.SG {
				wr.SG[i] = SGE(x.MR, i, 1)
			}
			return wr
		}},
		{"BadOpcode", func(t *testing.T, x *End, ah verbs.AH, y *End) verbs.SendWR {
			wr := good(x, ah, y)
			wr.Opcode = 99
			return wr
		}},
		{"ZeroOpcode", func(t *testing.T, x *End, ah verbs.AH, y *End) verbs.SendWR {
			wr := good(x, ah, y)
			wr.Opcode = 0
			return wr
		}},
		{"RDMAWriteOnUD", func(t *testing.T, x *End, ah verbs.AH, y *End) verbs.SendWR {
			wr := good(x, ah, y)
			wr.Opcode, wr.RemoteAddr, wr.RKey = verbs.OpRDMAWrite, y.MR.Addr(), y.MR.RKey()
			return wr
		}},
		{"UDBeyondMTU", func(t *testing.T, x *End, ah verbs.AH, y *End) verbs.SendWR {
			wr := good(x, ah, y)
			wr.SG = SG(x.MR, 0, x.Dev.Attr().ActiveMTU.Bytes()+1)
			return wr
		}},
	}
}

func badInputTests() []test {
	var tests []test
	for _, c := range badSends() {
		tests = append(tests, test{"BadInput/Send/" + c.name, func(t *testing.T, a, b verbs.Device) { testBadSend(t, a, b, c) }})
	}
	for _, c := range []struct {
		name string
		sg   func(mr verbs.MR) []verbs.SGE
	}{
		{"BadLKey", func(mr verbs.MR) []verbs.SGE {
			s := SGE(mr, 0, 256)
			s.LKey ^= 0x5a5a5a5a
			return []verbs.SGE{s}
		}},
		{"BeyondMR", func(mr verbs.MR) []verbs.SGE { return SG(mr, MRLen-100, 256) }},
		{"TooManySGEs", func(mr verbs.MR) []verbs.SGE {
			sg := make([]verbs.SGE, 4097)
			for i := range sg {
				sg[i] = SGE(mr, i*8, 8)
			}
			return sg
		}},
	} {
		tests = append(tests, test{"BadInput/Recv/" + c.name, func(t *testing.T, a, b verbs.Device) { testBadRecv(t, a, b, c.sg) }})
	}
	return append(tests,
		test{"BadInput/AtomicShortSGE", testAtomicShortSGE},
		test{"BadInput/ClosedQP", testClosedQP},
	)
}

// testBadSend posts good, bad, good in one chain. The provider either
// refuses the bad WR at post time (n=1, ErrInvalidArgument, and only the
// first WR is sent) or accepts it and completes it with an error status,
// as hardware does for what it checks late.
func testBadSend(t *testing.T, a, b verbs.Device, c badSend) {
	x, y := UDPair(t, a, b)
	ah := AH(t, x, y.QP.Address())
	PostRecv(t, y.QP, verbs.RecvWR{ID: 11, SG: SG(y.MR, 0, 256)}, verbs.RecvWR{ID: 12, SG: SG(y.MR, 256, 256)},
		verbs.RecvWR{ID: 13, SG: SG(y.MR, 512, 256)})
	wrs := []verbs.SendWR{
		udWR(x, ah, y, 1, verbs.OpSendWithImm, 1, 0),
		c.wr(t, x, ah, y),
		udWR(x, ah, y, 3, verbs.OpSendWithImm, 3, 0),
	}
	n, err := call(t, func() (int, error) { return x.QP.PostSend(wrs) })
	if err == nil {
		if n != len(wrs) {
			t.Fatalf("PostSend posted %d of %d WRs without an error", n, len(wrs))
		}
		wcs := PollN(t, x.SendCQ, 2, DefaultTimeout)
		ExpectWC(t, wcs[0], 1, verbs.WCSend)
		if wcs[1].ID != 2 || wcs[1].Status == verbs.WCSuccess {
			t.Errorf("PostSend accepted the bad WR, and its completion is %s, want an error status", FormatWC(wcs[1]))
		}
		return
	}
	if n != 1 || !errors.Is(err, verbs.ErrInvalidArgument) {
		t.Errorf("PostSend returned n=%d err=%v, want n=1 (the bad WR's index) and ErrInvalidArgument", n, err)
	}
	if n != 1 {
		return
	}
	ExpectWC(t, PollOne(t, x.SendCQ, DefaultTimeout), 1, verbs.WCSend)
	checkUDRecv(t, PollOne(t, y.RecvCQ, DefaultTimeout), 11, x, y, 0, true, 1)
	// The WR after the refused one was not posted: a marker comes next.
	sendImm(t, x, ah, y, 4, 4)
	checkUDRecv(t, PollOne(t, y.RecvCQ, DefaultTimeout), 12, x, y, 0, true, 4)
	ExpectEmpty(t, x.SendCQ, "after a refused WR")
}

// testBadRecv: a bad receive WR is refused at post time, or the message
// that lands in it completes with an error status.
func testBadRecv(t *testing.T, a, b verbs.Device, sg func(verbs.MR) []verbs.SGE) {
	x, y := UDPair(t, a, b)
	n, err := call(t, func() (int, error) {
		return y.QP.PostRecv([]verbs.RecvWR{{ID: 1, SG: SG(y.MR, 0, 256)}, {ID: 2, SG: sg(y.MR)}})
	})
	if err != nil {
		if n != 1 || !errors.Is(err, verbs.ErrInvalidArgument) {
			t.Errorf("PostRecv returned n=%d err=%v, want n=1 (the bad WR's index) and ErrInvalidArgument", n, err)
		}
		return
	}
	ah := AH(t, x, y.QP.Address())
	sendImm(t, x, ah, y, 1, 1)
	sendImm(t, x, ah, y, 2, 2)
	wcs := PollN(t, y.RecvCQ, 2, DefaultTimeout)
	checkUDRecv(t, wcs[0], 1, x, y, 0, true, 1)
	if wcs[1].ID != 2 || wcs[1].Status == verbs.WCSuccess {
		t.Errorf("PostRecv accepted the bad WR, and its completion is %s, want an error status", FormatWC(wcs[1]))
	}
}

// testAtomicShortSGE: an atomic's local buffer must be one 8-byte SGE.
func testAtomicShortSGE(t *testing.T, a, b verbs.Device) {
	x, y := ConnectPair(t, a, b, verbs.RC, verbs.MTU1024)
	Fill(y.MR.Bytes()[:8], 0)
	wr := verbs.SendWR{ID: 1, Opcode: verbs.OpAtomicFetchAdd, Flags: verbs.Signaled, SG: SG(x.MR, 0, 4),
		RemoteAddr: y.MR.Addr(), RKey: y.MR.RKey(), CompareAdd: 1}
	n, err := call(t, func() (int, error) { return x.QP.PostSend([]verbs.SendWR{wr}) })
	if err != nil {
		if n != 0 || !errors.Is(err, verbs.ErrInvalidArgument) {
			t.Errorf("PostSend returned n=%d err=%v, want 0 and ErrInvalidArgument", n, err)
		}
		return
	}
	if wc := PollOne(t, x.SendCQ, DefaultTimeout); wc.Status == verbs.WCSuccess {
		t.Errorf("FETCH_AND_ADD into a 4-byte SGE completed: %s", FormatWC(wc))
	}
}

// testClosedQP: posting to a closed QP is ErrClosed.
func testClosedQP(t *testing.T, a, b verbs.Device) {
	x, y := UDPair(t, a, b)
	ah := AH(t, x, y.QP.Address())
	must(t, x.QP.Close())
	n, err := call(t, func() (int, error) {
		return x.QP.PostSend([]verbs.SendWR{udWR(x, ah, y, 1, verbs.OpSendWithImm, 1, 0)})
	})
	if n != 0 || !errors.Is(err, verbs.ErrClosed) {
		t.Errorf("PostSend on a closed QP: n=%d err=%v, want 0 and ErrClosed", n, err)
	}
	n, err = call(t, func() (int, error) { return x.QP.PostRecv([]verbs.RecvWR{{ID: 2, SG: SG(x.MR, 0, 64)}}) })
	if n != 0 || !errors.Is(err, verbs.ErrClosed) {
		t.Errorf("PostRecv on a closed QP: n=%d err=%v, want 0 and ErrClosed", n, err)
	}
	if err := x.QP.Modify(&verbs.QPAttr{State: verbs.StateErr}, verbs.AttrState); !errors.Is(err, verbs.ErrClosed) {
		t.Errorf("Modify on a closed QP: %v, want ErrClosed", err)
	}
}
