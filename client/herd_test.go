package client

import (
	"context"
	"errors"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seqd/seqd/admin/handshake"
	"github.com/seqd/seqd/dataplane"
	"github.com/seqd/seqd/herd"
	wk "github.com/seqd/seqd/internal/worker"
	"github.com/seqd/seqd/spec"
	"github.com/seqd/seqd/verbs"
)

// herdMaxWindow is the herd server's MaxWindow in these tests: the slots
// of a client QP's block.
const herdMaxWindow = 32

type herdRig struct {
	srv  *herd.Server
	sdev verbs.Device // the server's device
	cli  verbs.Device // the client's device
	pd   verbs.PD
	conn *herdConn
	st   *stats
	orc  *fakeOracle
	t0   time.Time
}

func newHERDRig(t testing.TB, srvOpts, cliOpts string, qps, window int) *herdRig {
	t.Helper()
	r := &herdRig{orc: &fakeOracle{BehindEvery: 7}, st: &stats{}, t0: time.Now()}
	var err error
	r.sdev = openSoft(t, srvOpts)
	r.srv, err = herd.New(herd.Config{Config: wk.Config{Device: r.sdev, Oracle: r.orc, Behind: errBehind, Workers: 2}, MaxWindow: herdMaxWindow, MaxQPs: 8})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.srv.Close() })
	r.cli = openSoft(t, cliOpts)
	if r.pd, err = r.cli.AllocPD(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.pd.Close() })
	r.conn = r.admit(t, "test", qps, window)
	return r
}

// admit creates a herdConn of nqps QPs on the rig's device and admits
// it.
func (r *herdRig) admit(t testing.TB, name string, nqps, window int) *herdConn {
	t.Helper()
	c, err := newHERD(r.pd, r.cli, r.st, nqps, window, 5*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	recv, write := c.endpoints()
	g, err := r.srv.Admit(context.Background(), handshake.Admission{Name: name, Window: window, QPs: recv, ConnQPs: write}, handshake.SessionRef{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.attach(g); err != nil {
		t.Fatal(err)
	}
	return c
}

// counter is the value of st's counter name (of reason, if given).
func counter(st dataplane.Stats, name, reason string) uint64 {
	for _, c := range st.Counters {
		if c.Name == name && c.Reason == reason {
			return c.Value
		}
	}
	return 0
}

func (r *herdRig) now() time.Duration { return time.Since(r.t0) }

func (r *herdRig) run(t testing.TB, total int) []uint64 {
	t.Helper()
	return drive(t, r.conn, r.st, total, r.now)
}

func TestHERDServeClean(t *testing.T) {
	r := newHERDRig(t, "", "", 2, 8)
	vs := r.run(t, 3000)
	checkUnique(t, vs)
	// A worker counts a batch after its doorbell: the client may hold the
	// last answers before the server has counted them.
	st := r.srv.Stats()
	for deadline := time.Now().Add(5 * time.Second); st.Served < 3000 && time.Now().Before(deadline); st = r.srv.Stats() {
		time.Sleep(time.Millisecond)
	}
	if st.Served < 3000 || st.Batches == 0 {
		t.Fatalf("server stats %+v", st)
	}
	if st.Batches >= st.Served {
		t.Logf("no batching seen: %+v", st)
	}
}

func TestHERDServeFaults(t *testing.T) {
	opts := "loss=0.05,dup=0.05,reorder=0.05,seed=3"
	r := newHERDRig(t, opts, opts, 2, 8)
	vs := r.run(t, 2000)
	checkUnique(t, vs)
	st := r.srv.Stats()
	t.Logf("server %+v client retransmits=%d stale=%d", st, r.st.retransmits.Load(), r.st.stale.Load())
	if r.st.retransmits.Load() == 0 {
		t.Errorf("5%% loss but no retransmission")
	}
	// Whether a duplicated WRITE is seen as a duplicate depends on timing
	// (a copy that lands before the server polls the slot just rewrites
	// it); that duplicates were injected is what makes the run count.
	var duplicated uint64
	r.cli.(verbs.Counters).VisitCounters(func(name string, v uint64) {
		if name == verbs.CounterInjectedDup {
			duplicated = v
		}
	})
	if duplicated == 0 {
		t.Errorf("5%% duplication but the client's provider duplicated nothing")
	}
	t.Logf("duplicates injected by the client: %d, seen by the server: %d", duplicated, st.Retransmits)
}

// TestHERDNeverAnswersTwice writes the same (slot, seq) twice: the server
// answers once and counts a duplicate.
func TestHERDNeverAnswersTwice(t *testing.T) {
	r := newHERDRig(t, "", "", 1, 1)
	if n, err := r.conn.Send(r.now(), []int{0}); n != 1 || err != nil {
		t.Fatal(n, err)
	}
	q := r.conn.qps[0]
	res := make([]result, 4)
	got := 0
	deadline := time.Now().Add(5 * time.Second)
	for got == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no answer")
		}
		got += r.conn.Poll(r.now(), res)
		if st := r.srv.Stats(); got == 0 && counter(st, "drops_total", "expired")+counter(st, "drops_total", "late") > 0 {
			// Dropped by age (a loaded machine overslept the idle
			// worker's sweep): retransmit, as a client does.
			r.conn.Expire(r.now())
		}
	}
	// Replay the very same WRITE (same seq) and wait until the server has
	// seen it.
	wr := q.wrs[0]
	wr.Flags = verbs.Inline | verbs.Signaled
	if _, err := q.uc.PostSend([]verbs.SendWR{wr}); err != nil {
		t.Fatal(err)
	}
	for r.srv.Stats().Retransmits == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("duplicate never seen: %+v", r.srv.Stats())
		}
		time.Sleep(time.Millisecond)
	}
	// The position is free; a stale answer would be counted, not returned.
	if n := r.conn.Poll(r.now(), res); n != 0 {
		t.Fatalf("got %d answers to a replayed WRITE", n)
	}
	if st := r.srv.Stats(); st.Served != 1 {
		t.Fatalf("server answered %d requests, want 1", st.Served)
	}
}

// TestHERDStopMovesToErr: after Stop, writes get no answer and admission
// fails.
func TestHERDStopMovesToErr(t *testing.T) {
	r := newHERDRig(t, "", "", 1, 4)
	r.run(t, 10)
	if _, err := r.srv.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.conn.Send(r.now(), []int{0, 1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	served := r.srv.Stats().Served
	res := make([]result, 4)
	end := time.Now().Add(50 * time.Millisecond)
	for time.Now().Before(end) {
		if n := r.conn.Poll(r.now(), res); n != 0 {
			t.Fatalf("answer after Stop: %+v", res[:n])
		}
	}
	if got := r.srv.Stats().Served; got != served {
		t.Fatalf("served %d after Stop", got-served)
	}
	recv, write := r.conn.endpoints()
	a := handshake.Admission{Name: "late", Window: 4, QPs: recv[:1], ConnQPs: write[:1]}
	if _, err := r.srv.Admit(context.Background(), a, handshake.SessionRef{}); !errors.Is(err, herd.ErrClosed) {
		t.Fatalf("Admit after Stop = %v", err)
	}
}

// TestHERDNoAnswerAfterMaxResidence: a WRITE whose claim succeeds only
// after spec.MaxResidence is never answered; it is dropped (counted as
// late) right before the doorbell. Before the fix the age was checked
// only while the oracle reported behind, so this answer left 3×
// MaxResidence after the request landed.
func TestHERDNoAnswerAfterMaxResidence(t *testing.T) {
	r := newHERDRig(t, "", "", 1, 1)
	r.orc.SetBehindEvery(0)
	r.orc.Delay.Store(int64(3 * spec.MaxResidence))
	if n, err := r.conn.Send(r.now(), []int{0}); n != 1 || err != nil {
		t.Fatal(n, err)
	}
	res := make([]result, 4)
	deadline := time.Now().Add(10 * time.Second)
	for counter(r.srv.Stats(), "drops_total", "late") == 0 {
		if n := r.conn.Poll(r.now(), res); n > 0 {
			t.Fatalf("answered %d although the claim took %v, longer than MaxResidence %v", res[0].Value, 3*spec.MaxResidence, spec.MaxResidence)
		}
		if time.Now().After(deadline) {
			t.Fatalf("neither answered nor dropped: %+v", r.srv.Stats())
		}
		if counter(r.srv.Stats(), "drops_total", "expired") > 0 {
			// Too old when swept (a loaded machine): rewrite it, as a
			// client does, until one is claimed.
			r.conn.Expire(r.now())
		}
		time.Sleep(time.Millisecond)
	}
	if n := r.conn.Poll(r.now(), res); n > 0 {
		t.Fatalf("answered and counted late: %+v", res[0])
	}
	if st := r.srv.Stats(); counter(st, "drops_total", "late") == 0 || st.Served != 0 {
		t.Fatalf("stats %+v, want one late drop and nothing served", st)
	}
	// Prompt claims are answered as usual: the client's retransmission
	// (a fresh sequence number) is.
	r.orc.Delay.Store(0)
	for r.conn.Poll(r.now(), res) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the retransmission was never answered: %+v", r.srv.Stats())
		}
		r.conn.Expire(r.now())
		time.Sleep(time.Millisecond)
	}
	checkUnique(t, r.run(t, 20))
}

// TestHERDWindowFlood (issue 12, windows enforced, HERD): a client
// granted a window of 4 rewrites every slot of its block (32, far beyond
// its window) as fast as it can, ignoring answers, while a well-behaved
// client runs. HERD requests consume no receives, and the server reads
// only the first window slots of a block, so the flooder is answered at
// most for the slots of its window, and the well-behaved client's every
// request is answered with a unique value above all returned before it
// was sent (checked by drive).
func TestHERDWindowFlood(t *testing.T) {
	r := newHERDRig(t, "", "", 1, 8)
	const fwin = 4
	fl := r.admit(t, "flooder", 1, fwin)
	stop := make(chan struct{})
	done := make(chan [2]uint64)
	var beyond atomic.Uint64 // WRITEs beyond the flooder's window
	go func() {
		q := fl.qps[0]
		buf := fl.reqMR.Bytes()[:spec.SlotLen]
		sge := []verbs.SGE{{Addr: fl.reqMR.Addr(), Length: spec.SlotLen, LKey: fl.reqMR.LKey()}}
		wcs := make([]verbs.WC, 64)
		seq := spec.Seq(0)
		var inWindow uint64
		for i := 0; ; i++ {
			select {
			case <-stop:
				done <- [2]uint64{inWindow, beyond.Load()}
				return
			default:
			}
			pos := i % herdMaxWindow
			seq = seq.Next()
			spec.PutSlot(buf, seq) // inline: copied at post time
			wr := []verbs.SendWR{{ID: uint64(i), Opcode: verbs.OpRDMAWrite, Flags: verbs.Inline,
				SG: sge, RemoteAddr: q.addr + uint64(pos*spec.SlotLen), RKey: q.rkey}}
			if i%2 == 1 { // signal every other WRITE: the send CQ is small
				wr[0].Flags |= verbs.Signaled
			}
			if n, _ := q.uc.PostSend(wr); n == 1 {
				if pos < fwin {
					inWindow++
				} else {
					beyond.Add(1)
				}
			}
			fl.sendCQ.Poll(wcs)
			if i%32 == 31 {
				runtime.Gosched() // a flood, not a CPU hog on a small test machine
			}
		}
	}()
	// The well-behaved client runs once the flood is on (the flooder's
	// goroutine may start late on a loaded machine).
	for deadline := time.Now().Add(10 * time.Second); beyond.Load() < 64; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			close(stop)
			t.Fatalf("the flooder wrote %d beyond its window in 10 s", (<-done)[1])
		}
	}
	vs := r.run(t, 500)
	close(stop)
	writes := <-done
	checkUnique(t, vs)
	st := r.srv.Stats()
	flooderAnswered := st.Served - uint64(len(vs))
	t.Logf("flooder: %d WRITEs into its window, %d beyond it; server answered %d of the flooder's; well-behaved: %d answered",
		writes[0], writes[1], flooderAnswered, len(vs))
	if writes[1] == 0 {
		t.Fatal("the flooder never wrote beyond its window")
	}
	if flooderAnswered > writes[0] {
		t.Fatalf("the server answered %d of the flooder's requests, more than the %d it wrote into its window", flooderAnswered, writes[0])
	}
}
