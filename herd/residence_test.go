package herd

import (
	"runtime"
	"testing"
	"time"

	"github.com/seqd/seqd/spec"
	"github.com/seqd/seqd/verbs"
)

// TestNoAnswerAfterMaxResidence: a WRITE whose claim succeeds only after
// spec.MaxResidence is never answered; it is dropped (counted as late)
// right before the doorbell. Before the fix the age was checked only
// while the oracle reported behind, so this answer left 3× MaxResidence
// after the request landed.
func TestNoAnswerAfterMaxResidence(t *testing.T) {
	r := newRig(t, "", "", 1, 1)
	r.orc.mu.Lock()
	r.orc.behindEvery = 0
	r.orc.mu.Unlock()
	r.orc.delay.Store(int64(3 * spec.MaxResidence))
	ids := make([]int, 1)
	if n, err := r.conn.Send(r.now(), ids); n != 1 || err != nil {
		t.Fatal(n, err)
	}
	res := make([]Result, 4)
	deadline := time.Now().Add(10 * time.Second)
	for r.srv.totals().Drops["late"] == 0 {
		if n := r.conn.Poll(r.now(), res); n > 0 {
			t.Fatalf("answered %d although the claim took %v, longer than MaxResidence %v", res[0].Value, 3*spec.MaxResidence, spec.MaxResidence)
		}
		if time.Now().After(deadline) {
			t.Fatalf("neither answered nor dropped: %+v", r.srv.totals())
		}
		if r.srv.totals().Drops["expired"] > 0 {
			// Too old when swept (a loaded machine): rewrite it, as a
			// client does, until one is claimed.
			r.conn.Expire(r.now())
		}
		time.Sleep(time.Millisecond)
	}
	if n := r.conn.Poll(r.now(), res); n > 0 {
		t.Fatalf("answered and counted late: %+v", res[0])
	}
	if st := r.srv.totals(); st.Drops["late"] == 0 || st.Requests != 0 {
		t.Fatalf("stats %+v, want one late drop and nothing served", st)
	}
	// Prompt claims are answered as usual: the client's retransmission
	// (a fresh sequence number) is.
	r.orc.delay.Store(0)
	for r.conn.Poll(r.now(), res) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the retransmission was never answered: %+v", r.srv.totals())
		}
		r.conn.Expire(r.now())
		time.Sleep(time.Millisecond)
	}
	checkUnique(t, r.run(t, 20))
}

// TestWindowFlood (issue 12, windows enforced, HERD): a client granted a
// window of 4 rewrites every slot of its block (32, far beyond its
// window) as fast as it can, ignoring answers, while a well-behaved
// client runs. HERD requests consume no receives, and the server reads
// only the first window slots of a block, so the flooder is answered at
// most for the slots of its window, and the well-behaved client's every
// request is answered with a unique value above all returned before it
// was sent (checked by rig.run).
func TestWindowFlood(t *testing.T) {
	r := newRig(t, "", "", 1, 8)
	const fwin = 4
	fl, err := NewConn(r.pd, r.cli, 1, fwin, 5*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer fl.Close()
	g, err := admit(r.srv, "flooder", fl.QPs(), fwin)
	if err != nil {
		t.Fatal(err)
	}
	if err := fl.Attach(g); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	done := make(chan [2]uint64)
	go func() {
		q := fl.qps[0]
		buf := fl.reqMR.Bytes()[:spec.SlotLen]
		sge := []verbs.SGE{{Addr: fl.reqMR.Addr(), Length: spec.SlotLen, LKey: fl.reqMR.LKey()}}
		wcs := make([]verbs.WC, 64)
		seq := spec.Seq(0)
		var inWindow, beyond uint64
		for i := 0; ; i++ {
			select {
			case <-stop:
				done <- [2]uint64{inWindow, beyond}
				return
			default:
			}
			pos := i % r.srv.cfg.MaxWindow
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
					beyond++
				}
			}
			fl.sendCQ.Poll(wcs)
			if i%32 == 31 {
				runtime.Gosched() // a flood, not a CPU hog on a small test machine
			}
		}
	}()
	vs := r.run(t, 500)
	close(stop)
	writes := <-done
	checkUnique(t, vs)
	st := r.srv.totals()
	flooderAnswered := st.Requests - uint64(len(vs))
	t.Logf("flooder: %d WRITEs into its window, %d beyond it; server answered %d of the flooder's; well-behaved: %d answered",
		writes[0], writes[1], flooderAnswered, len(vs))
	if writes[1] == 0 {
		t.Fatal("the flooder never wrote beyond its window")
	}
	if flooderAnswered > writes[0] {
		t.Fatalf("the server answered %d of the flooder's requests, more than the %d it wrote into its window", flooderAnswered, writes[0])
	}
}
