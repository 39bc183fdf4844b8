package soft

import (
	"context"
	"fmt"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/seqd/seqd/verbs"
)

// TestNoWakeupPerDatagram: while CQ pollers move the packets, the socket
// wakes no thread, whether it sends or receives. The receiver here
// blocks in CQ.Wait once per round (so its queue's progress goroutine
// takes over receiving) and then busy-polls a ping-pong of 400 packets;
// the sender never polls for arrivals. With the socket in Go's netpoller
// (edge-triggered, input and output) a parked thread woke for datagrams
// sent and received: 3,100-3,800 voluntary context switches in this test;
// since, about 250. The process's count must stay under 50 a round.
func TestNoWakeupPerDatagram(t *testing.T) {
	const rounds, perRound = 20, 400
	p := newUDPair(t, 64)
	a, b, ah, rwr, sg := p.a, p.b, p.ah, p.rwr, p.sg
	var err error
	wr := []verbs.SendWR{{Opcode: verbs.OpSendWithImm, AH: ah, RemoteQPN: b.qp.QPN(), RemoteQKey: verbs.DefaultQKey}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	wc := make([]verbs.WC, 16)
	sent, recvd := 0, 0
	awc := make([]verbs.WC, 16)
	send := func() error {
		wr[0].ID, wr[0].Imm = uint64(sent), uint32(sent)
		wr[0].Flags = 0
		if sent%32 == 31 {
			wr[0].Flags = verbs.Signaled
		}
		if n, err := a.qp.PostSend(wr); n != 1 || err != nil {
			return fmt.Errorf("post: %d %v", n, err)
		}
		sent++
		a.cq.Poll(awc) // send completions, without a system call
		return nil
	}
	take := func(n int) {
		for _, c := range wc[:n] {
			if c.Status != verbs.WCSuccess || c.Imm != uint32(recvd) {
				t.Fatalf("completion %d: %+v", recvd, c)
			}
			recvd++
			b.postRecvs(t, rwr, sg, int(c.ID), 1)
		}
	}
	var before, after unix.Rusage
	unix.Getrusage(unix.RUSAGE_SELF, &before)
	for range rounds {
		// Block once: the progress goroutine takes over, then steps aside.
		// The sender runs meanwhile on its own goroutine.
		sendErr := make(chan error, 1)
		go func() { sendErr <- send() }()
		for n := 0; n == 0; {
			if err := b.cq.Wait(ctx); err != nil {
				t.Fatal(err)
			}
			if n, err = b.cq.Poll(wc); err != nil {
				t.Fatal(err)
			}
			take(n)
		}
		if err := <-sendErr; err != nil {
			t.Fatal(err)
		}
		for range perRound {
			if err := send(); err != nil {
				t.Fatal(err)
			}
			for n := 0; n == 0; {
				if ctx.Err() != nil {
					t.Fatalf("%d of %d received", recvd, sent)
				}
				if n, err = b.cq.Poll(wc); err != nil {
					t.Fatal(err)
				}
				take(n)
			}
		}
	}
	unix.Getrusage(unix.RUSAGE_SELF, &after)
	switches := after.Nvcsw - before.Nvcsw
	t.Logf("%d packets, %d rounds: %d voluntary context switches", recvd, rounds, switches)
	if limit := int64(rounds * 50); switches > limit {
		t.Fatalf("%d voluntary context switches for %d packets in %d rounds, want at most %d: threads woken per datagram", switches, recvd, rounds, limit)
	}
}
