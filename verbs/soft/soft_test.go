package soft

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/seqd/seqd/verbs"
)

// udEnd is one side of a UD test: device, PD, CQ, QP and a receive MR.
type udEnd struct {
	dev verbs.Device
	pd  verbs.PD
	cq  verbs.CQ
	qp  verbs.QP
	mr  verbs.MR
}

func newUDEnd(t testing.TB, opts verbs.Options, depth int) *udEnd {
	t.Helper()
	dev, err := Open("127.0.0.1:0", opts)
	if err != nil {
		t.Fatal(err)
	}
	e := &udEnd{dev: dev}
	if e.pd, err = dev.AllocPD(); err != nil {
		t.Fatal(err)
	}
	if e.cq, err = dev.CreateCQ(4 * depth); err != nil {
		t.Fatal(err)
	}
	if e.qp, err = e.pd.CreateQP(verbs.QPInitAttr{Type: verbs.UD, SendCQ: e.cq, RecvCQ: e.cq,
		Cap: verbs.QPCap{MaxSendWR: depth, MaxRecvWR: depth, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		t.Fatal(err)
	}
	if err := verbs.BringUpUD(e.qp, verbs.DefaultQKey, 0); err != nil {
		t.Fatal(err)
	}
	if e.mr, err = e.pd.RegMR(depth*64, verbs.AccessLocalWrite); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		e.qp.Close()
		e.mr.Close()
		e.cq.Close()
		e.pd.Close()
		e.dev.Close()
	})
	return e
}

// udPair is a sender a and a receiver b with depth header-only RECVs
// posted (rwr and sg, for re-posting), and an AH from a to b.
type udPair struct {
	a, b *udEnd
	ah   verbs.AH
	rwr  []verbs.RecvWR
	sg   []verbs.SGE
}

func newUDPair(t testing.TB, depth int) *udPair {
	t.Helper()
	p := &udPair{a: newUDEnd(t, nil, depth), b: newUDEnd(t, nil, depth),
		rwr: make([]verbs.RecvWR, depth), sg: make([]verbs.SGE, depth)}
	p.b.postRecvs(t, p.rwr, p.sg, 0, depth)
	ah, err := p.a.pd.CreateAH(verbs.AHAttr{Dest: p.b.qp.Address()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ah.Close() }) // before the ends' cleanups
	p.ah = ah
	return p
}

// postRecvs posts n header-only RECVs (GRH area only).
func (e *udEnd) postRecvs(t testing.TB, wrs []verbs.RecvWR, sges []verbs.SGE, first, n int) {
	for i := 0; i < n; i++ {
		slot := (first + i) % len(sges)
		sges[slot] = verbs.SGE{Addr: e.mr.Addr() + uint64(slot*64), Length: 64, LKey: e.mr.LKey()}
		wrs[i] = verbs.RecvWR{ID: uint64(slot), SG: sges[slot : slot+1]}
	}
	if _, err := e.qp.PostRecv(wrs[:n]); err != nil {
		t.Fatal(err)
	}
}

func TestUDHeaderOnlySmoke(t *testing.T) {
	p := newUDPair(t, 64)
	a, b, ah := p.a, p.b, p.ah
	wrs := make([]verbs.SendWR, 32)
	for i := range wrs {
		wrs[i] = verbs.SendWR{ID: uint64(i), Opcode: verbs.OpSendWithImm, Imm: uint32(1000 + i), AH: ah,
			RemoteQPN: b.qp.QPN(), RemoteQKey: verbs.DefaultQKey}
	}
	wrs[31].Flags = verbs.Signaled
	if n, err := a.qp.PostSend(wrs); n != 32 || err != nil {
		t.Fatal(n, err)
	}
	wc := make([]verbs.WC, 16)
	got := 0
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for got < 32 {
		n, err := b.cq.Poll(wc)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range wc[:n] {
			if c.Status != verbs.WCSuccess || c.Imm != uint32(1000+got) || c.ByteLen != 40 || c.Flags&verbs.WCWithImm == 0 || c.SrcQP != a.qp.QPN() {
				t.Fatalf("wc %d: %+v", got, c)
			}
			if c.Src != a.qp.Address() {
				t.Fatalf("src %v, want %v", c.Src, a.qp.Address())
			}
			got++
		}
		if n == 0 {
			if err := b.cq.Wait(ctx); err != nil {
				t.Fatalf("after %d: %v", got, err)
			}
		}
	}
	n, _ := a.cq.Poll(wc)
	if n != 1 || wc[0].ID != 31 || wc[0].Opcode != verbs.WCSend {
		t.Fatalf("send completions: %d %+v", n, wc[0])
	}
}

// TestReceiveAfterHeldPacket is a regression test: a packet held back by
// reorder injection used to leave the progress goroutine's read deadline
// in the past, after which it never read again, so a QP whose owner waits
// in CQ.Wait (rather than polling) stopped receiving.
func TestReceiveAfterHeldPacket(t *testing.T) {
	a := newUDEnd(t, verbs.Options{"reorder": "0.5", "seed": "3"}, 64)
	b := newUDEnd(t, nil, 64)
	rwr := make([]verbs.RecvWR, 64)
	sg := make([]verbs.SGE, 64)
	a.postRecvs(t, rwr, sg, 0, 64)
	b.postRecvs(t, rwr, sg, 0, 64)
	toB, err := a.pd.CreateAH(verbs.AHAttr{Dest: b.qp.Address()})
	if err != nil {
		t.Fatal(err)
	}
	defer toB.Close()
	toA, err := b.pd.CreateAH(verbs.AHAttr{Dest: a.qp.Address()})
	if err != nil {
		t.Fatal(err)
	}
	defer toA.Close()
	wc := make([]verbs.WC, 16)
	// waitOne waits for one receive completion, polling until the CQ is
	// empty and then blocking in Wait, and re-posts its RECV.
	waitOne := func(e *udEnd, what string, wc []verbs.WC) error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for {
			n, err := e.cq.Poll(wc)
			if err != nil {
				return err
			}
			for _, c := range wc[:n] {
				if c.Opcode == verbs.WCRecv {
					slot := int(c.ID)
					sg[slot] = verbs.SGE{Addr: e.mr.Addr() + uint64(slot*64), Length: 64, LKey: e.mr.LKey()}
					_, err := e.qp.PostRecv([]verbs.RecvWR{{ID: uint64(slot), SG: sg[slot : slot+1]}})
					return err
				}
			}
			if err := e.cq.Wait(ctx); err != nil {
				return fmt.Errorf("%s: %w", what, err)
			}
		}
	}
	for i := 0; i < 20; i++ {
		// a sends (and may hold the packet back), b answers, a waits.
		if _, err := a.qp.PostSend([]verbs.SendWR{{Opcode: verbs.OpSendWithImm, Imm: uint32(i), AH: toB,
			RemoteQPN: b.qp.QPN(), RemoteQKey: verbs.DefaultQKey}}); err != nil {
			t.Fatal(err)
		}
		// a busy-polls for a few ticks (its progress goroutine steps aside
		// and releases the held packet on a tick), then blocks in Wait.
		for start := time.Now(); time.Since(start) < 3*tickPeriod; {
			if n, _ := a.cq.Poll(wc); n != 0 {
				t.Fatalf("unexpected completion %+v", wc[0])
			}
		}
		if err := waitOne(b, "request", wc); err != nil {
			t.Fatal(err)
		}
		// a blocks in Wait before the answer is sent, so only its
		// progress goroutine can receive it.
		done := make(chan error, 1)
		go func() { done <- waitOne(a, fmt.Sprintf("answer %d", i), make([]verbs.WC, 16)) }()
		for deadline := time.Now().Add(5 * time.Second); a.cq.(*cq).waiting.Load() == 0; {
			if time.Now().After(deadline) {
				t.Fatal("a never waited")
			}
			runtime.Gosched()
		}
		if _, err := b.qp.PostSend([]verbs.SendWR{{Opcode: verbs.OpSendWithImm, Imm: uint32(i), AH: toA,
			RemoteQPN: a.qp.QPN(), RemoteQKey: verbs.DefaultQKey}}); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	var held uint64
	a.dev.(verbs.Counters).VisitCounters(func(k string, v uint64) {
		if k == verbs.CounterInjectedReorder {
			held = v
		}
	})
	if held == 0 {
		t.Fatal("no packet was held back: the test did not exercise reordering")
	}
}

// TestDoorbellBatcher: sends posted on two QPs while the doorbell is held
// stay on the host, and leave together, in one syscall, when it rings.
func TestDoorbellBatcher(t *testing.T) {
	p := newUDPair(t, 16)
	a, b := p.a, p.b
	qp2, err := a.pd.CreateQP(verbs.QPInitAttr{Type: verbs.UD, SendCQ: a.cq, RecvCQ: a.cq,
		Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer qp2.Close()
	if err := verbs.BringUpUD(qp2, verbs.DefaultQKey, 0); err != nil {
		t.Fatal(err)
	}
	ah, err := a.pd.CreateAH(verbs.AHAttr{Dest: b.qp.Address()})
	if err != nil {
		t.Fatal(err)
	}
	defer ah.Close()
	counter := func(name string) (v uint64) {
		a.dev.(verbs.Counters).VisitCounters(func(n string, x uint64) {
			if n == name {
				v = x
			}
		})
		return v
	}
	batcher, ok := a.dev.(verbs.DoorbellBatcher)
	if !ok {
		t.Fatal("soft device is not a DoorbellBatcher")
	}
	tx0, sys0 := counter(verbs.CounterTxPackets), counter(verbs.CounterTxSyscalls)
	batcher.HoldDoorbell()
	for i, qp := range []verbs.QP{a.qp, qp2} {
		wrs := make([]verbs.SendWR, 3)
		for j := range wrs {
			wrs[j] = verbs.SendWR{Opcode: verbs.OpSendWithImm, Imm: uint32(10*i + j), AH: ah,
				RemoteQPN: b.qp.QPN(), RemoteQKey: verbs.DefaultQKey}
		}
		if n, err := qp.PostSend(wrs); n != 3 || err != nil {
			t.Fatal(n, err)
		}
	}
	if tx := counter(verbs.CounterTxPackets); tx != tx0 {
		t.Fatalf("%d packets left while the doorbell was held", tx-tx0)
	}
	batcher.RingDoorbell()
	if tx, sys := counter(verbs.CounterTxPackets)-tx0, counter(verbs.CounterTxSyscalls)-sys0; tx != 6 || sys != 1 {
		t.Fatalf("ring sent %d packets in %d syscalls, want 6 in 1", tx, sys)
	}
	wc := make([]verbs.WC, 16)
	got := map[uint32]bool{}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for len(got) < 6 {
		n, err := b.cq.Poll(wc)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range wc[:n] {
			got[c.Imm] = true
		}
		if n == 0 {
			if err := b.cq.Wait(ctx); err != nil {
				t.Fatalf("received %v: %v", got, err)
			}
		}
	}
}
