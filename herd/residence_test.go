package herd

import (
	"testing"
	"time"

	"github.com/seqd/seqd/spec"
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
	for r.srv.Stats().Drops["late"] == 0 {
		if n := r.conn.Poll(r.now(), res); n > 0 {
			t.Fatalf("answered %d although the claim took %v, longer than MaxResidence %v", res[0].Value, 3*spec.MaxResidence, spec.MaxResidence)
		}
		if time.Now().After(deadline) {
			t.Fatalf("neither answered nor dropped: %+v", r.srv.Stats())
		}
		time.Sleep(time.Millisecond)
	}
	if n := r.conn.Poll(r.now(), res); n > 0 {
		t.Fatalf("answered and counted late: %+v", res[0])
	}
	if st := r.srv.Stats(); st.Drops["late"] != 1 || st.Requests != 0 {
		t.Fatalf("stats %+v, want one late drop and nothing served", st)
	}
	// Prompt claims are answered as usual: the client's retransmission
	// (a fresh sequence number) is.
	r.orc.delay.Store(0)
	for r.conn.Poll(r.now(), res) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the retransmission was never answered: %+v", r.srv.Stats())
		}
		r.conn.Expire(r.now())
		time.Sleep(time.Millisecond)
	}
	checkUnique(t, r.run(t, 20))
}
