package soft

import (
	"errors"
	"testing"
	"time"

	"github.com/seqd/seqd/verbs"
)

// TestCQRing pushes and takes completions in uneven runs round a small
// ring, so that both copy in two pieces many times, and checks that they
// come out in order; then overruns it.
func TestCQRing(t *testing.T) {
	dev, err := Open("127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	cqi, err := dev.CreateCQ(7)
	if err != nil {
		t.Fatal(err)
	}
	defer cqi.Close()
	c := cqi.(*cq)
	var in, out uint64
	wcs := make([]verbs.WC, 7)
	for round := 0; round < 200; round++ {
		n := 1 + round%5
		if room := 7 - c.n; n > room {
			n = room
		}
		batch := make([]verbs.WC, n)
		for i := range batch {
			batch[i].ID = in
			in++
		}
		c.pushN(batch)
		k := c.take(wcs[:1+round%4])
		for _, wc := range wcs[:k] {
			if wc.ID != out {
				t.Fatalf("round %d: completion %d, want %d", round, wc.ID, out)
			}
			out++
		}
	}
	for k := c.take(wcs); k > 0; k = c.take(wcs) {
		for _, wc := range wcs[:k] {
			if wc.ID != out {
				t.Fatalf("draining: completion %d, want %d", wc.ID, out)
			}
			out++
		}
	}
	if in != out {
		t.Fatalf("%d pushed, %d taken", in, out)
	}

	// Ten completions into seven places: seven are kept, three lost and
	// counted, and Poll reports the overrun once the CQ is empty.
	over := c.d.ctr.cqOverrun.Load()
	batch := make([]verbs.WC, 10)
	for i := range batch {
		batch[i].ID = uint64(100 + i)
	}
	c.pushN(batch)
	if got := c.d.ctr.cqOverrun.Load() - over; got != 3 {
		t.Errorf("overrun counter +%d, want +3", got)
	}
	k, err := c.Poll(wcs)
	if k != 7 || err != nil || wcs[0].ID != 100 || wcs[6].ID != 106 {
		t.Fatalf("Poll: %d, %v, first %d last %d; want the 7 kept", k, err, wcs[0].ID, wcs[6].ID)
	}
	if _, err := c.Poll(wcs); !errors.Is(err, verbs.ErrCQOverrun) {
		t.Fatalf("Poll after an overrun: %v, want ErrCQOverrun", err)
	}
}

// TestPollIntoOrder polls a UD QP's receives three at a time out of one
// burst of forty: the first three of each inline burst go straight into
// the poller's slice (queue.pollInto), the rest through the ring, and
// they must still come out in the order they were sent.
func TestPollIntoOrder(t *testing.T) {
	const n = 40
	p := newUDPair(t, 64)
	wrs := make([]verbs.SendWR, n)
	for i := range wrs {
		wrs[i] = verbs.SendWR{ID: uint64(i), Opcode: verbs.OpSendWithImm, Imm: uint32(i), AH: p.ah,
			RemoteQPN: p.b.qp.QPN(), RemoteQKey: verbs.DefaultQKey}
	}
	for round := 0; round < 20; round++ {
		if k, err := p.a.qp.PostSend(wrs); k != n || err != nil {
			t.Fatal(k, err)
		}
		wc := make([]verbs.WC, 3)
		deadline := time.Now().Add(5 * time.Second)
		for got := 0; got < n; {
			k, err := p.b.cq.Poll(wc)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range wc[:k] {
				if c.Status != verbs.WCSuccess || c.Imm != uint32(got) {
					t.Fatalf("round %d: completion %d has immediate %d (status %v), want %d", round, got, c.Imm, c.Status, got)
				}
				got++
			}
			if k == 0 && time.Now().After(deadline) {
				t.Fatalf("round %d: %d of %d received", round, got, n)
			}
		}
		p.b.postRecvs(t, p.rwr, p.sg, 0, n)
		for k, _ := p.a.cq.Poll(wc); k > 0; k, _ = p.a.cq.Poll(wc) {
		}
	}
}
