package soft

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seqd/seqd/verbs"
)

// TestQKeyChangeWhileReceiving: a UD QP's Q_Key may change in RTS while
// packets arrive (a client given a new answer Q_Key by the next leader
// of an HA group). The receive path read the Q_Key unsynchronised while
// Modify wrote it: `go test -race` flagged it in the HA failover test.
// After the change, only the new Q_Key is accepted.
func TestQKeyChangeWhileReceiving(t *testing.T) {
	const depth = 256
	p := newUDPair(t, depth)
	a, b, ah := p.a, p.b, p.ah
	const k1, k2 = verbs.DefaultQKey, verbs.DefaultQKey + 1
	send := func(qkey uint32, n int) {
		wrs := make([]verbs.SendWR, n)
		for i := range wrs {
			wrs[i] = verbs.SendWR{ID: uint64(i), Opcode: verbs.OpSendWithImm, Imm: qkey, AH: ah,
				RemoteQPN: b.qp.QPN(), RemoteQKey: qkey}
		}
		if _, err := a.qp.PostSend(wrs); err != nil {
			t.Error(err)
		}
	}
	// Receives arrive while the Q_Key flips.
	stop := make(chan struct{})
	var got atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		wc := make([]verbs.WC, 64)
		for {
			select {
			case <-stop:
				return
			default:
			}
			send(k1, 8)
			a.cq.Poll(wc) // unsignaled: nothing to reap, keeps the send path busy
			if n, _ := b.cq.Poll(wc); n > 0 {
				got.Add(int64(n))
				p.b.postRecvs(t, p.rwr, p.sg, 0, n)
			}
		}
	}()
	// Flip until 2,000 SENDs have arrived (those under the other Q_Key
	// are dropped) and at least 200 times.
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; i < 200 || got.Load() < 2000; i++ {
		if time.Now().After(deadline) {
			close(stop)
			wg.Wait()
			t.Fatalf("%d SENDs delivered in 30s of Q_Key changes, want 2000", got.Load())
		}
		k := uint32(k1)
		if i%2 == 0 {
			k = k2
		}
		if err := b.qp.Modify(&verbs.QPAttr{QKey: k}, verbs.AttrQKey); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	// Drain, then the Q_Key is k2: a packet under k1 is dropped, one
	// under k2 delivered.
	if err := b.qp.Modify(&verbs.QPAttr{QKey: k2}, verbs.AttrQKey); err != nil {
		t.Fatal(err)
	}
	wc := make([]verbs.WC, depth)
	for {
		n, _ := b.cq.Poll(wc)
		if n == 0 {
			break
		}
		p.b.postRecvs(t, p.rwr, p.sg, 0, n)
	}
	send(k1, 1)
	send(k2, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for {
		n, err := b.cq.Poll(wc[:1])
		if err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			if wc[0].Imm != k2 {
				t.Fatalf("after the change to Q_Key %#x, a SEND under %#x was delivered", k2, wc[0].Imm)
			}
			return
		}
		if err := b.cq.Wait(ctx); err != nil {
			t.Fatalf("no SEND under the new Q_Key delivered: %v", err)
		}
	}
}
