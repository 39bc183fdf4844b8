package respq_test

import (
	"testing"

	"github.com/seqd/seqd/internal/respq"
	"github.com/seqd/seqd/verbs"
	"github.com/seqd/seqd/verbs/soft"
	"github.com/seqd/seqd/verbs/verbstest"
)

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
	return s, peer, ah
}

// TestRotationAndSignaling: batches rotate over the QPs; every k-th work
// request of a QP is signaled; reaped completions free send queue room,
// so a QP keeps taking batches forever; payload slots carry the bytes.
func TestRotationAndSignaling(t *testing.T) {
	const depth, every = 8, 4
	s, peer, ah := newSet(t, depth, every)
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
			b.Prepare(&wrs[i], i)
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
