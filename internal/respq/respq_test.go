package respq_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/seqd/seqd/internal/respq"
	"github.com/seqd/seqd/verbs"
	"github.com/seqd/seqd/verbs/soft"
	"github.com/seqd/seqd/verbs/verbstest"
)

// newPeer opens a UD end on a device of its own, the answers'
// destination, and an AH to it on pd.
func newPeer(t *testing.T, pd verbs.PD) (*verbstest.End, verbs.AH) {
	t.Helper()
	peerDev, err := soft.Open("127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { peerDev.Close() })
	peer := verbstest.NewEnd(t, peerDev, verbs.UD)
	verbstest.BringUp(t, peer)
	ah, err := pd.CreateAH(verbs.AHAttr{Dest: peer.QP.Address()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ah.Close() })
	return peer, ah
}

func newSet(t *testing.T, depth, every int) (*respq.Set, *verbstest.End, verbs.AH) {
	t.Helper()
	dev, err := soft.Open("127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	pd, err := dev.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := dev.CreateCQ(64)
	if err != nil {
		t.Fatal(err)
	}
	s, err := respq.New(respq.Config{PD: pd, CQ: cq, QPs: 3, Depth: depth, SignalEvery: every, SlotLen: 8,
		QKey: verbs.DefaultQKey, Batch: 16})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(); cq.Close(); pd.Close(); dev.Close() })
	peer, ah := newPeer(t, pd)
	return s, peer, ah
}

// TestRotationAndSignaling: batches rotate over the QPs; every k-th work
// request of a QP is signaled; reaped completions free send queue room,
// so a QP keeps taking batches forever; payload slots carry the bytes.
func TestRotationAndSignaling(t *testing.T) {
	const depth = 8
	for _, every := range []uint64{4, 3} { // a power of two (masked) and not (divided)
		t.Run(fmt.Sprintf("every=%d", every), func(t *testing.T) {
			testRotationAndSignaling(t, depth, every)
		})
	}
}

func testRotationAndSignaling(t *testing.T, depth int, every uint64) {
	s, peer, ah := newSet(t, depth, int(every))
	wrs := make([]verbs.SendWR, 3)
	sges := make([]verbs.SGE, 3)
	for batch := 0; batch < 30; batch++ {
		b, ok := s.Next(len(wrs))
		if !ok {
			t.Fatalf("batch %d: no room", batch)
		}
		for i := range wrs {
			buf, sge := b.Slot(i)
			copy(buf, "answer!!")
			sges[i] = sge
			wrs[i] = verbs.SendWR{Opcode: verbs.OpSend, SG: sges[i : i+1], AH: ah, RemoteQPN: peer.QP.QPN(),
				RemoteQKey: verbs.DefaultQKey, Flags: verbs.Inline}
		}
		b.Prepare(wrs)
		for i := range wrs {
			seq, qi := wrs[i].ID>>8, int(wrs[i].ID&0xff)
			if qi != batch%3 {
				t.Fatalf("batch %d went to QP %d", batch, qi)
			}
			if signaled := wrs[i].Flags&verbs.Signaled != 0; signaled != (seq%every == every-1) {
				t.Fatalf("batch %d WR %d (seq %d): signaled %v", batch, i, seq, signaled)
			}
			if wrs[i].Flags&verbs.Inline == 0 {
				t.Fatal("Prepare dropped the caller's flags")
			}
		}
		if n, err := b.Post(wrs); n != len(wrs) || err != nil {
			t.Fatalf("batch %d: posted %d: %v", batch, n, err)
		}
	}
}

func TestConfigRefused(t *testing.T) {
	for _, c := range []respq.Config{
		{QPs: 0, Depth: 8, SignalEvery: 4},
		{QPs: 1, Depth: 8, SignalEvery: 8},
		{QPs: 1, Depth: 1, SignalEvery: 1},
		{QPs: 256, Depth: 8, SignalEvery: 4},
	} {
		if _, err := respq.New(c); err == nil {
			t.Errorf("New(%+v) succeeded", c)
		}
	}
}

// TestSharedCQ: a set on a CQ that also takes another QP's receives
// (Config.Shared): PostMany posts that QP's receive chain and the
// answers in one call; waiting for send queue room polls the CQ and
// keeps the receive completion it finds for TakeSpilled, so the worker
// loses no request; Complete tells the set's send completions from
// others'.
func TestSharedCQ(t *testing.T) {
	dev, err := soft.Open("127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	pd, _ := dev.AllocPD()
	t.Cleanup(func() { pd.Close() })
	cq, err := dev.CreateCQ(64)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cq.Close() })
	rq := verbstest.NewEndAttr(t, dev, verbs.QPInitAttr{Type: verbs.UD, SendCQ: cq, RecvCQ: cq,
		Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	verbstest.BringUp(t, rq)
	s, err := respq.New(respq.Config{PD: pd, CQ: cq, QPs: 1, Depth: 8, SignalEvery: 4, SlotLen: 8,
		QKey: verbs.DefaultQKey, Batch: 16, Shared: true, Device: dev})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	peer, ah := newPeer(t, pd)

	recvs := []verbs.RecvWR{{ID: 7, SG: []verbs.SGE{{Addr: rq.MR.Addr(), Length: 64, LKey: rq.MR.LKey()}}}}
	wrs := make([]verbs.SendWR, 3)
	prep := func(b respq.Batch) {
		for i := range wrs {
			wrs[i] = verbs.SendWR{Opcode: verbs.OpSendWithImm, AH: ah, RemoteQPN: peer.QP.QPN(), RemoteQKey: verbs.DefaultQKey}
		}
		b.Prepare(wrs)
	}
	b, ok := s.Next(len(wrs))
	if !ok {
		t.Fatal("no room")
	}
	prep(b)
	chains := []verbs.RecvChain{{QP: rq.QP, WRs: recvs}}
	if n, err := s.PostMany(b, chains, wrs); n != len(wrs) || err != nil || chains[0].Posted != 1 {
		t.Fatalf("PostMany = %d, %v; receives posted %d", n, err, chains[0].Posted)
	}
	// A request for rq, in its socket before the set next polls the CQ.
	pah := verbstest.AH(t, peer, rq.QP.Address())
	if _, err := peer.QP.PostSend([]verbs.SendWR{{Opcode: verbs.OpSendWithImm, Imm: 42, AH: pah, RemoteQPN: rq.QP.QPN(), RemoteQKey: verbs.DefaultQKey}}); err != nil {
		t.Fatal(err)
	}
	// Put the request's completion in the shared CQ behind the send
	// completions, without polling that CQ: drive the device's one
	// socket through another CQ until the packet has been received.
	cq2, err := dev.CreateCQ(4)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cq2.Close() })
	verbstest.NewEndAttr(t, dev, verbs.QPInitAttr{Type: verbs.UD, SendCQ: cq2, RecvCQ: cq2,
		Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}}) // its CQ drives the socket
	deadline := time.Now().Add(5 * time.Second)
	for rxPackets(dev) == 0 {
		cq2.Poll(make([]verbs.WC, 4))
		if time.Now().After(deadline) {
			t.Fatal("the request never arrived")
		}
	}
	// 3 + 3 posted; the third batch needs room (depth 8 keeps 7): Next
	// reaps, polling the shared CQ, until the signaled completions free it.
	for batch := 1; batch < 4; batch++ {
		b, ok := s.Next(len(wrs))
		if !ok {
			t.Fatalf("batch %d: no room", batch)
		}
		prep(b)
		if n, err := s.PostMany(b, nil, wrs); n != len(wrs) || err != nil {
			t.Fatalf("batch %d: PostMany = %d, %v", batch, n, err)
		}
	}
	wc := make([]verbs.WC, 8)
	deadline = time.Now().Add(5 * time.Second)
	for s.Spilled() == 0 {
		// Had the reaps not met the request, the CQ still holds it.
		if n, _ := cq.Poll(wc); n > 0 {
			for i := range wc[:n] {
				if mine, _, _ := s.Complete(&wc[i]); !mine {
					if wc[i].QPN != rq.QP.QPN() || wc[i].Imm != 42 {
						t.Fatalf("foreign completion %s", verbstest.FormatWC(wc[i]))
					}
					return // found by the worker's own poll: nothing lost either
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the request's completion never showed")
		}
	}
	if n := s.TakeSpilled(wc); n != 1 || wc[0].QPN != rq.QP.QPN() || wc[0].Imm != 42 || wc[0].ID != 7 {
		t.Fatalf("TakeSpilled = %d: %s", n, verbstest.FormatWC(wc[0]))
	}
	if s.Spilled() != 0 {
		t.Fatalf("%d still spilled after TakeSpilled", s.Spilled())
	}
}

func rxPackets(dev verbs.Device) (n uint64) {
	dev.(verbs.Counters).VisitCounters(func(name string, v uint64) {
		if name == verbs.CounterRxPackets {
			n = v
		}
	})
	return n
}

// TestLateAnswersReaped: answers whose send deadline has passed when
// they are posted complete with WCDeadlineErr (the provider's test shows
// they never leave: soft.TestSendDeadline), signaled
// or not, and Reap counts them as late (not failed), also while Next
// waits for room (TakeFailed). Their completions free the send queue as
// signaled ones do. Each answer here is weighed as i+1 values
// (Batch.Weigh): the values of those that did not leave are counted.
func TestLateAnswersReaped(t *testing.T) {
	const depth, every = 8, 4
	s, peer, ah := newSet(t, depth, every)
	wrs := make([]verbs.SendWR, 3)
	late, unsent := 0, 0
	for batch := 0; batch < 12; batch++ {
		b, ok := s.Next(len(wrs))
		if !ok {
			t.Fatalf("batch %d: no room: late completions did not free the queue", batch)
		}
		for i := range wrs {
			wrs[i] = verbs.SendWR{Opcode: verbs.OpSendWithImm, AH: ah, RemoteQPN: peer.QP.QPN(),
				RemoteQKey: verbs.DefaultQKey, Deadline: verbs.Now() - 1}
		}
		b.Prepare(wrs)
		for i := range wrs {
			b.Weigh(i, uint32(i+1))
		}
		if n, err := b.Post(wrs); n != len(wrs) || err != nil {
			t.Fatalf("batch %d: posted %d: %v", batch, n, err)
		}
		n, failed, l, u := s.Reap()
		if failed != 0 || n != l {
			t.Fatalf("batch %d: Reap = %d, %d failed, %d late", batch, n, failed, l)
		}
		late += l
		unsent += u
	}
	f, l, u := s.TakeFailed()
	if late+l != 12*len(wrs) || f != 0 {
		t.Fatalf("%d late reaped, %d while waiting, %d failed; want %d late", late, l, f, 12*len(wrs))
	}
	if unsent+u != 12*(1+2+3) {
		t.Fatalf("%d values unsent, want %d (12 batches of answers weighing 1, 2 and 3)", unsent+u, 12*6)
	}
}
