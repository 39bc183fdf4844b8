package herd

import (
	"context"
	"log/slog"
	"runtime"
	"testing"
	"time"

	"github.com/seqd/seqd/admin/handshake"
	wk "github.com/seqd/seqd/internal/worker"
	"github.com/seqd/seqd/spec"
	"github.com/seqd/seqd/verbs"
	"github.com/seqd/seqd/verbs/verbstest"
)

// TestTwoCrossingsPerBatch: each pass of a herd worker's loop polls its
// one CQ (UC QPs and response QPs) once, and a batch adds one post of its
// answers (issue 16, defect 8: a pass polled two CQs before). Counted at
// the verbs API (verbstest.Counting): the ibv provider makes one cgo call
// per call.
func TestTwoCrossingsPerBatch(t *testing.T) {
	dev := verbstest.Counting(open(t, ""))
	srv, err := New(Config{Config: wk.Config{Device: dev, Oracle: &fakeOracle{}, Behind: errBehind, Workers: 1,
		Logger: slog.New(slog.DiscardHandler)}, MaxQPs: 4, MaxWindow: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	const window = 16
	cdev := open(t, "")
	uc := verbstest.NewEndAttr(t, cdev, verbs.QPInitAttr{Type: verbs.UC, Cap: verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: spec.SlotLen}})
	ud := verbstest.NewEndAttr(t, cdev, verbs.QPInitAttr{Type: verbs.UD, Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 64, MaxSendSGE: 1, MaxRecvSGE: 1}})
	g, err := srv.Admit(context.Background(), handshake.Admission{Name: "count", Window: window,
		ConnQPs: []handshake.Endpoint{{Addr: uc.QP.Address(), QPN: uc.QP.QPN()}},
		QPs:     []handshake.Endpoint{{Addr: ud.QP.Address(), QPN: ud.QP.QPN()}}}, handshake.SessionRef{})
	if err != nil {
		t.Fatal(err)
	}
	if err := verbs.Connect(uc.QP, verbs.ConnectAttr{Remote: g.ServerConnQPs[0].Addr, RemoteQPN: g.ServerConnQPs[0].QPN}); err != nil {
		t.Fatal(err)
	}
	if err := verbs.BringUpUD(ud.QP, g.AnswerQKey, 0); err != nil {
		t.Fatal(err)
	}
	recvs := make([]verbs.RecvWR, window)
	for i := range recvs {
		recvs[i] = verbs.RecvWR{ID: uint64(i), SG: []verbs.SGE{{Addr: ud.MR.Addr() + uint64(i*64), Length: 64, LKey: ud.MR.LKey()}}}
	}
	if _, err := ud.QP.PostRecv(recvs); err != nil {
		t.Fatal(err)
	}
	w := srv.Workers[0]
	polls0, posts0, sweeps0 := dev.Polls.Load(), dev.Posts.Load(), w.sweeps.Load()
	before := wk.Total(srv.Workers)
	const rounds = 40
	seq := spec.Seq(0)
	writes := make([]verbs.SendWR, window)
	wcs := make([]verbs.WC, window)
	// The worker's first sweeps of the new client set its arrival bound.
	for s0 := w.sweeps.Load(); w.sweeps.Load() < s0+2; {
		runtime.Gosched()
	}
	answered := uint64(0)
	for r := range rounds {
		// A round whose requests the worker dropped for their age (it
		// slept past spec.MaxResidence on a loaded machine) is sent
		// again, with the next sequence number.
		for try := 0; ; try++ {
			seq = seq.Next()
			for pos := range writes {
				off := (int(seq)%2*window + pos) * spec.SlotLen // not the buffers of the previous writes
				spec.PutSlot(uc.MR.Bytes()[off:], seq)
				writes[pos] = verbs.SendWR{Opcode: verbs.OpRDMAWrite, Flags: verbs.Inline,
					SG:         []verbs.SGE{{Addr: uc.MR.Addr() + uint64(off), Length: spec.SlotLen, LKey: uc.MR.LKey()}},
					RemoteAddr: g.RemoteAddr[0] + uint64(pos*spec.SlotLen), RKey: g.RKey[0]}
			}
			if n, err := uc.QP.PostSend(writes); n != window {
				t.Fatalf("round %d: %d writes posted: %v", r, n, err)
			}
			got, dropped := 0, uint64(0)
			d0 := wk.Total(srv.Workers).Drops
			deadline := time.Now().Add(10 * time.Second)
			for got+int(dropped) < window {
				n, err := ud.RecvCQ.Poll(wcs)
				if err != nil {
					t.Fatal(err)
				}
				for i := range wcs[:n] {
					if wcs[i].Status != verbs.WCSuccess {
						t.Fatalf("answer %s", verbstest.FormatWC(wcs[i]))
					}
					recvs[0].ID = wcs[i].ID
					recvs[0].SG[0].Addr = ud.MR.Addr() + wcs[i].ID*64
					if _, err := ud.QP.PostRecv(recvs[:1]); err != nil {
						t.Fatal(err)
					}
				}
				got += n
				if n == 0 {
					// Let the worker's sleep end: with a spinning goroutine
					// on one P and the other idle, Go runs timers only from
					// sysmon, every 10 ms (docs/performance.md).
					runtime.Gosched()
					d := wk.Total(srv.Workers).Drops
					dropped = d["expired"] + d["late"] - d0["expired"] - d0["late"]
				}
				if time.Now().After(deadline) {
					t.Fatalf("round %d: %d of %d answers; drops %v", r, got, window, wk.Total(srv.Workers).Drops)
				}
			}
			answered += uint64(got)
			if dropped == 0 {
				break
			}
			if try == 3 {
				t.Skipf("round %d: the machine kept the worker asleep past spec.MaxResidence %d times", r, try+1)
			}
		}
	}
	// The worker counts a batch after its doorbell: the last batch's
	// answers can arrive before its counts do.
	after := wk.Total(srv.Workers)
	for deadline := time.Now().Add(5 * time.Second); after.Requests-before.Requests < answered && time.Now().Before(deadline); {
		runtime.Gosched()
		after = wk.Total(srv.Workers)
	}
	batches := after.Batches - before.Batches
	polls, posts, passes := dev.Polls.Load()-polls0, dev.Posts.Load()-posts0, w.sweeps.Load()-sweeps0
	t.Logf("%d batches in %d passes: %d polls, %d posts", batches, passes, polls, posts)
	if after.Requests-before.Requests != answered || answered < rounds*window {
		t.Fatalf("answered %d by the server's count, %d by the client's, want %d", after.Requests-before.Requests, answered, rounds*window)
	}
	if posts != batches {
		t.Errorf("%d posts for %d batches, want one each", posts, batches)
	}
	// The counters are read while the worker runs: at most one pass
	// apart.
	if polls > passes+1 {
		t.Errorf("%d polls in %d passes, want one each", polls, passes)
	}
}
