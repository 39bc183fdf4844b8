//go:build linux

package soft

import (
	"context"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/seqd/seqd/verbs"
)

// TestSendDeadline (issue 26, item 7): a UD send whose deadline passes
// while the doorbell waits for socket room is never sent, whatever the
// wait: it completes with WCDeadlineErr (signaled or not) and is counted
// (tx_drop_deadline), while the sends of the same chain with a later
// deadline, or none, leave as usual. The socket is made to look full
// (EAGAIN) on the first sendmmsg, which returns only once the near
// deadline has passed.
func TestSendDeadline(t *testing.T) {
	real := sendmmsg
	stalled := false
	var near verbs.Time
	sendmmsg = func(fd uintptr, hdrs []unix.Mmsghdr) (int, unix.Errno) {
		if near != 0 && !stalled {
			stalled = true
			for verbs.Now() <= near {
				time.Sleep(100 * time.Microsecond)
			}
			return 0, unix.EAGAIN
		}
		return real(fd, hdrs)
	}
	t.Cleanup(func() { sendmmsg = real }) // after the devices close

	p := newUDPair(t, 16)
	a, b, ah := p.a, p.b, p.ah
	send := func(wrs []verbs.SendWR) {
		t.Helper()
		for i := range wrs {
			w := &wrs[i]
			w.Opcode, w.AH, w.RemoteQPN, w.RemoteQKey = verbs.OpSendWithImm, ah, b.qp.QPN(), verbs.DefaultQKey
		}
		if n, err := a.qp.PostSend(wrs); n != len(wrs) || err != nil {
			t.Fatal(n, err)
		}
	}
	near = verbs.Now().Add(time.Millisecond)
	far := near.Add(time.Hour)
	send([]verbs.SendWR{
		{ID: 0, Imm: 0, Deadline: far},
		{ID: 1, Imm: 1, Deadline: near},
		{ID: 2, Imm: 2},
		{ID: 3, Imm: 3, Deadline: near, Flags: verbs.Signaled},
	})
	if !stalled {
		t.Fatal("the doorbell never waited")
	}
	send([]verbs.SendWR{{ID: 4, Imm: 4, Deadline: near, Flags: verbs.Signaled}, {ID: 5, Imm: 5, Flags: verbs.Signaled}})

	// The receiver gets 0, 2 and 5, in order.
	want := []uint32{0, 2, 5}
	wc := make([]verbs.WC, 16)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for got := 0; got < len(want); {
		n, err := b.cq.Poll(wc)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range wc[:n] {
			if c.Imm != want[got] {
				t.Fatalf("received immediate %d, want %d (a send past its deadline left)", c.Imm, want[got])
			}
			got++
		}
		if n == 0 {
			if err := b.cq.Wait(ctx); err != nil {
				t.Fatalf("%d of %d arrived: %v", got, len(want), err)
			}
		}
	}
	// The sender's completions: 1 and 3 late, 4 late (refused at its
	// first check), 5 sent.
	n, err := a.cq.Poll(wc)
	if err != nil {
		t.Fatal(err)
	}
	type comp struct {
		id uint64
		st verbs.WCStatus
	}
	var gotC []comp
	for _, c := range wc[:n] {
		gotC = append(gotC, comp{c.ID, c.Status})
	}
	wantC := []comp{{1, verbs.WCDeadlineErr}, {3, verbs.WCDeadlineErr}, {4, verbs.WCDeadlineErr}, {5, verbs.WCSuccess}}
	if len(gotC) != len(wantC) {
		t.Fatalf("send completions %v, want %v", gotC, wantC)
	}
	for i := range wantC {
		if gotC[i] != wantC[i] {
			t.Fatalf("send completions %v, want %v", gotC, wantC)
		}
	}
	var drops uint64
	a.dev.(verbs.Counters).VisitCounters(func(name string, v uint64) {
		if name == verbs.CounterDropDeadline {
			drops = v
		}
	})
	if drops != 3 {
		t.Fatalf("%s = %d, want 3", verbs.CounterDropDeadline, drops)
	}
}
