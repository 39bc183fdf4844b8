package verbstest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/seqd/seqd/verbs"
)

func qpTests() []test {
	return []test{
		{"QP/PostSendBeforeRTS", testPostSendBeforeRTS},
		{"QP/ModifyChecks", testModifyChecks},
		{"QP/BringUp", testBringUp},
		{"QP/ErrFlushesRecvs", testErrFlushesRecvs},
	}
}

func cqTests() []test {
	return []test{
		{"CQ/Wait", testCQWait},
	}
}

// testPostSendBeforeRTS: sends are refused with ErrQPState until RTS;
// receives may be posted from INIT on and are used once the QP is up.
func testPostSendBeforeRTS(t *testing.T, a, b verbs.Device) {
	x := NewEnd(t, a, verbs.UD)
	y := NewEnd(t, b, verbs.UD)
	BringUp(t, y)
	ah := AH(t, x, y.QP.Address())
	wr := udWR(x, ah, y, 1, verbs.OpSendWithImm, 1, 0)
	refused := func(state string) {
		t.Helper()
		n, err := call(t, func() (int, error) { return x.QP.PostSend([]verbs.SendWR{wr}) })
		if n != 0 || !errors.Is(err, verbs.ErrQPState) {
			t.Errorf("PostSend in %s: n=%d err=%v, want 0 and ErrQPState", state, n, err)
		}
	}
	refused("RESET")
	must(t, x.QP.Modify(&verbs.QPAttr{State: verbs.StateInit, PortNum: 1, QKey: verbs.DefaultQKey},
		verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrQKey))
	expectState(t, x.QP, verbs.StateInit)
	refused("INIT")
	PostRecv(t, x.QP, verbs.RecvWR{ID: 5, SG: SG(x.MR, 0, 256)}) // allowed from INIT on
	must(t, x.QP.Modify(&verbs.QPAttr{State: verbs.StateRTR}, verbs.AttrState))
	expectState(t, x.QP, verbs.StateRTR)
	refused("RTR")
	must(t, x.QP.Modify(&verbs.QPAttr{State: verbs.StateRTS, SQPSN: 1}, verbs.AttrState|verbs.AttrSQPSN))
	expectState(t, x.QP, verbs.StateRTS)

	// Both directions work now, and the RECV posted in INIT is used.
	PostRecv(t, y.QP, verbs.RecvWR{ID: 6, SG: SG(y.MR, 0, 256)})
	sendImm(t, x, ah, y, 2, 0x77)
	checkUDRecv(t, PollOne(t, y.RecvCQ, DefaultTimeout), 6, x, y, 0, true, 0x77)
	sendImm(t, y, AH(t, y, x.QP.Address()), x, 3, 0x78)
	checkUDRecv(t, PollOne(t, x.RecvCQ, DefaultTimeout), 5, y, x, 0, true, 0x78)
}

// testModifyChecks: Modify refuses missing and unexpected attributes and
// impossible transitions, and a refused Modify changes nothing.
func testModifyChecks(t *testing.T, a, b verbs.Device) {
	ud := NewEnd(t, a, verbs.UD)
	rc := NewEnd(t, a, verbs.RC)
	peer := NewEnd(t, b, verbs.RC)
	cases := []struct {
		name string
		qp   verbs.QP
		attr verbs.QPAttr
		mask verbs.QPAttrMask
		want error
	}{
		{"UD RESET→INIT without QKey", ud.QP, verbs.QPAttr{State: verbs.StateInit, PortNum: 1},
			verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort, verbs.ErrInvalidArgument},
		{"UD RESET→INIT with PathMTU", ud.QP, verbs.QPAttr{State: verbs.StateInit, PortNum: 1, QKey: 1, PathMTU: verbs.MTU1024},
			verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort | verbs.AttrQKey | verbs.AttrPathMTU, verbs.ErrInvalidArgument},
		{"UD RESET→RTS", ud.QP, verbs.QPAttr{State: verbs.StateRTS}, verbs.AttrState | verbs.AttrSQPSN, verbs.ErrBadTransition},
		{"UD RESET→RTR", ud.QP, verbs.QPAttr{State: verbs.StateRTR}, verbs.AttrState, verbs.ErrBadTransition},
		{"RC RESET→INIT without AccessFlags", rc.QP, verbs.QPAttr{State: verbs.StateInit, PortNum: 1},
			verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort, verbs.ErrInvalidArgument},
	}
	for _, c := range cases {
		err := c.qp.Modify(&c.attr, c.mask)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: Modify returned %v, want %v", c.name, err, c.want)
		}
		expectState(t, c.qp, verbs.StateReset)
	}
	if err := ud.QP.Modify(nil, verbs.AttrState); !errors.Is(err, verbs.ErrInvalidArgument) {
		t.Errorf("Modify(nil): %v, want ErrInvalidArgument", err)
	}

	// RC INIT→RTR without the destination QPN, then RTR→RTS without the
	// retry attributes.
	must(t, rc.QP.Modify(&verbs.QPAttr{State: verbs.StateInit, PortNum: 1, AccessFlags: AllAccess},
		verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags))
	rtr := verbs.QPAttr{State: verbs.StateRTR, AH: verbs.AHAttr{Dest: peer.QP.Address(), PortNum: 1},
		PathMTU: verbs.MTU1024, DestQPN: peer.QP.QPN(), MaxDestRdAtomic: 1, MinRNRTimer: 1}
	full := verbs.AttrState | verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN |
		verbs.AttrMaxDestRdAtomic | verbs.AttrMinRNRTimer
	if err := rc.QP.Modify(&rtr, full&^verbs.AttrDestQPN); !errors.Is(err, verbs.ErrInvalidArgument) {
		t.Errorf("RC INIT→RTR without DestQPN: %v, want ErrInvalidArgument", err)
	}
	expectState(t, rc.QP, verbs.StateInit)
	if err := rc.QP.Modify(&verbs.QPAttr{State: verbs.StateRTR, PathMTU: 42}, full); !errors.Is(err, verbs.ErrInvalidArgument) {
		t.Errorf("RC INIT→RTR with path MTU 42: %v, want ErrInvalidArgument", err)
	}
	must(t, rc.QP.Modify(&rtr, full))
	expectState(t, rc.QP, verbs.StateRTR)
	if err := rc.QP.Modify(&verbs.QPAttr{State: verbs.StateRTS}, verbs.AttrState|verbs.AttrSQPSN); !errors.Is(err, verbs.ErrInvalidArgument) {
		t.Errorf("RC RTR→RTS without timeout and retry counts: %v, want ErrInvalidArgument", err)
	}
	expectState(t, rc.QP, verbs.StateRTR)
}

// testBringUp: the helpers bring every QP type to RTS, and QPNs are
// valid and distinct.
func testBringUp(t *testing.T, a, b verbs.Device) {
	ud1, ud2 := UDPair(t, a, b)
	uc1, uc2 := ConnectPair(t, a, b, verbs.UC, verbs.MTU1024)
	rc1, rc2 := ConnectPair(t, a, b, verbs.RC, verbs.MTU4096)
	seen := map[string]verbs.QPType{}
	for _, e := range []*End{ud1, ud2, uc1, uc2, rc1, rc2} {
		qp := e.QP
		if qp.QPN() == 0 || qp.QPN() == 1 || qp.QPN() > verbs.MaxQPN {
			t.Errorf("%v QP has QPN %v (0 and 1 are reserved, 24 bits at most)", qp.Type(), qp.QPN())
		}
		key := fmt.Sprintf("%s/%v", e.Dev.Name(), qp.QPN())
		if other, dup := seen[key]; dup {
			t.Errorf("%v and %v QPs share %s", other, qp.Type(), key)
		}
		seen[key] = qp.Type()
		if !qp.Address().GID.Addr().IsValid() || qp.Address().GID == (verbs.GID{}) {
			t.Errorf("%v QP %v has no address: %v", qp.Type(), qp.QPN(), qp.Address())
		}
	}
	// Back to RESET and up again.
	must(t, ud1.QP.Modify(&verbs.QPAttr{State: verbs.StateReset}, verbs.AttrState))
	expectState(t, ud1.QP, verbs.StateReset)
	BringUp(t, ud1)
	PostRecv(t, ud2.QP, verbs.RecvWR{ID: 1, SG: SG(ud2.MR, 0, 256)})
	sendImm(t, ud1, AH(t, ud1, ud2.QP.Address()), ud2, 2, 3)
	checkUDRecv(t, PollOne(t, ud2.RecvCQ, DefaultTimeout), 1, ud1, ud2, 0, true, 3)
}

// testErrFlushesRecvs: moving a QP to ERR completes its posted RECVs with
// WCWRFlushErr, as libibverbs does.
func testErrFlushesRecvs(t *testing.T, a, b verbs.Device) {
	x, _ := UDPair(t, a, b)
	PostRecv(t, x.QP, verbs.RecvWR{ID: 1, SG: SG(x.MR, 0, 256)}, verbs.RecvWR{ID: 2, SG: SG(x.MR, 256, 256)})
	must(t, x.QP.Modify(&verbs.QPAttr{State: verbs.StateErr}, verbs.AttrState))
	expectState(t, x.QP, verbs.StateErr)
	for i, wc := range PollN(t, x.RecvCQ, 2, DefaultTimeout) {
		if wc.ID != uint64(i+1) || wc.Status != verbs.WCWRFlushErr {
			t.Errorf("flushed RECV %d: %s, want status %v", i+1, FormatWC(wc), verbs.WCWRFlushErr)
		}
	}
}

// testCQWait: Wait returns the context's error when nothing comes, and
// returns when a completion is ready.
func testCQWait(t *testing.T, a, b verbs.Device) {
	x, y := UDPair(t, a, b)
	if n, err := x.SendCQ.Poll(nil); n != 0 || err != nil {
		t.Errorf("Poll(nil) = %d, %v; want 0, nil", n, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	err := x.SendCQ.Wait(ctx)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Wait on an empty CQ returned %v, want context.DeadlineExceeded", err)
	}
	ctx, cancel = context.WithCancel(context.Background())
	cancel()
	if err := x.SendCQ.Wait(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Wait with a cancelled context returned %v, want context.Canceled", err)
	}

	PostRecv(t, y.QP, verbs.RecvWR{ID: 1, SG: SG(y.MR, 0, 256)})
	PostSend(t, x.QP, udWR(x, AH(t, x, y.QP.Address()), y, 9, verbs.OpSendWithImm, 5, 0))
	// PollN waits with Wait between empty polls; a lost wakeup times out.
	ExpectWC(t, PollOne(t, x.SendCQ, DefaultTimeout), 9, verbs.WCSend)
	checkUDRecv(t, PollOne(t, y.RecvCQ, DefaultTimeout), 1, x, y, 0, true, 5)
}

// call runs post, turning a panic into a test failure that names it.
func call(t *testing.T, post func() (int, error)) (n int, err error) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("provider panicked on bad input: %v", r)
		}
	}()
	return post()
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func expectState(t *testing.T, qp verbs.QP, want verbs.QPState) {
	t.Helper()
	if s := qp.State(); s != want {
		t.Errorf("%v QP %v is in state %v, want %v", qp.Type(), qp.QPN(), s, want)
	}
}
