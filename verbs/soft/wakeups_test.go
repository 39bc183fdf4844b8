//go:build linux

package soft

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/seqd/seqd/verbs"
)

// pingPong is the traffic of the wake-up checks: a sends header-only
// SENDs to b (every 32nd signaled, its send completions polled without a
// system call), b takes each and re-posts its receive.
type pingPong struct {
	p           *udPair
	wr          []verbs.SendWR
	wc, awc     []verbs.WC
	sent, recvd int
}

func newPingPong(t testing.TB) *pingPong {
	p := newUDPair(t, 64)
	return &pingPong{p: p, wc: make([]verbs.WC, 16), awc: make([]verbs.WC, 16),
		wr: []verbs.SendWR{{Opcode: verbs.OpSendWithImm, AH: p.ah, RemoteQPN: p.b.qp.QPN(), RemoteQKey: verbs.DefaultQKey}}}
}

func (x *pingPong) send() error {
	x.wr[0].ID, x.wr[0].Imm = uint64(x.sent), uint32(x.sent)
	x.wr[0].Flags = 0
	if x.sent%32 == 31 {
		x.wr[0].Flags = verbs.Signaled
	}
	if n, err := x.p.a.qp.PostSend(x.wr); n != 1 || err != nil {
		return fmt.Errorf("post: %d %v", n, err)
	}
	x.sent++
	x.p.a.cq.Poll(x.awc) // send completions, without a system call
	return nil
}

// take checks b's n completions in x.wc and re-posts their receives.
func (x *pingPong) take(t testing.TB, n int) {
	for _, c := range x.wc[:n] {
		if c.Status != verbs.WCSuccess || c.Imm != uint32(x.recvd) {
			t.Fatalf("completion %d: %+v", x.recvd, c)
		}
		x.recvd++
		x.p.b.postRecvs(t, x.p.rwr, x.p.sg, int(c.ID), 1)
	}
}

// blockOnce sends one packet while b blocks in CQ.Wait, so that b's
// queue's progress goroutine takes over receiving, and takes it.
func (x *pingPong) blockOnce(t testing.TB, ctx context.Context) {
	sendErr := make(chan error, 1)
	go func() { sendErr <- x.send() }()
	for n := 0; n == 0; {
		if err := x.p.b.cq.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		var err error
		if n, err = x.p.b.cq.Poll(x.wc); err != nil {
			t.Fatal(err)
		}
		x.take(t, n)
	}
	if err := <-sendErr; err != nil {
		t.Fatal(err)
	}
}

// busyOne sends one packet and busy-polls b until it has it.
func (x *pingPong) busyOne(t testing.TB, ctx context.Context) {
	if err := x.send(); err != nil {
		t.Fatal(err)
	}
	for n := 0; n == 0; {
		if ctx.Err() != nil {
			t.Fatalf("%d of %d received", x.recvd, x.sent)
		}
		var err error
		if n, err = x.p.b.cq.Poll(x.wc); err != nil {
			t.Fatal(err)
		}
		x.take(t, n)
	}
}

// BenchmarkWakeupsPerDatagram measures what TestNoWakeupPerDatagram used
// to assert (and what failed it on a loaded machine): the process's
// voluntary context switches per packet (vcsw/op) while CQ pollers move
// the packets. The receiver blocks in CQ.Wait once per 400 packets (its
// queue's progress goroutine takes over receiving, then steps aside) and
// busy-polls the rest; the sender never polls for arrivals. With the
// socket in Go's netpoller (edge-triggered, input and output) a parked
// thread woke for datagrams sent and received: about 0.4 switches per
// packet; since, about 0.03 (250 in 8,000 packets).
func BenchmarkWakeupsPerDatagram(b *testing.B) {
	const perRound = 400
	x := newPingPong(b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var before, after unix.Rusage
	b.ResetTimer()
	unix.Getrusage(unix.RUSAGE_SELF, &before)
	for x.recvd < b.N {
		x.blockOnce(b, ctx)
		for i := 0; i < perRound && x.recvd < b.N; i++ {
			x.busyOne(b, ctx)
		}
	}
	unix.Getrusage(unix.RUSAGE_SELF, &after)
	b.StopTimer()
	b.ReportMetric(float64(after.Nvcsw-before.Nvcsw)/float64(x.recvd), "vcsw/op")
}

// TestSocketOutOfNetpoller: what keeps a datagram from waking a thread,
// checked on the kernel's own record (/proc/self/fdinfo of every epoll
// instance of the process), not by counting wake-ups: a queue's socket
// is in no epoll instance but its own progress goroutine's (never in Go's
// netpoller, which would wake a parked thread for every datagram sent
// and received), it is in that one while a CQ waiter blocks, and it
// leaves it once pollers move the packets again.
func TestSocketOutOfNetpoller(t *testing.T) {
	x := newPingPong(t)
	q := x.p.b.qp.(*qp).q
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// only checks that no epoll instance but q.ep holds the socket, and
	// reports whether q.ep does.
	only := func(when string) (inOwn bool) {
		t.Helper()
		holders, err := epollHolders(q.fd)
		if err != nil {
			t.Skipf("epoll instances from /proc: %v", err)
		}
		for _, ep := range holders {
			if ep != q.ep {
				t.Fatalf("%s: the socket (fd %d) is in epoll instance %d, not only in its progress goroutine's (%d): a datagram would wake a thread", when, q.fd, ep, q.ep)
			}
			inOwn = true
		}
		return inOwn
	}
	only("at start")
	// A waiter blocks: the progress goroutine receives, the socket is in
	// its epoll instance (for as long as nobody polls).
	waited := make(chan error, 1)
	go func() { waited <- x.p.b.cq.Wait(ctx) }()
	for !only("while a waiter blocks") {
		if ctx.Err() != nil {
			t.Fatal("the socket never joined its progress goroutine's epoll instance while a waiter blocked")
		}
		time.Sleep(time.Millisecond)
	}
	if err := x.send(); err != nil {
		t.Fatal(err)
	}
	if err := <-waited; err != nil {
		t.Fatal(err)
	}
	n, err := x.p.b.cq.Poll(x.wc)
	if err != nil {
		t.Fatal(err)
	}
	x.take(t, n)
	// Pollers are back: the first datagram they take wakes the goroutine
	// once, and it takes the socket out; from then on no epoll instance
	// holds it while they keep polling.
	for only("while pollers poll") {
		x.busyOne(t, ctx)
	}
	for range 400 {
		x.busyOne(t, ctx)
		only("during the ping-pong")
	}
}

// epollHolders returns the descriptors of the process's epoll instances
// that hold fd (from /proc/self/fdinfo: a "tfd:" line per watched
// descriptor).
func epollHolders(fd int) ([]int, error) {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return nil, err
	}
	var holders []int
	for _, e := range ents {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err != nil || l != "anon_inode:[eventpoll]" {
			continue
		}
		info, err := os.ReadFile("/proc/self/fdinfo/" + e.Name())
		if err != nil {
			continue // closed meanwhile
		}
		for _, line := range strings.Split(string(info), "\n") {
			f := strings.Fields(line)
			if len(f) >= 2 && f[0] == "tfd:" && f[1] == strconv.Itoa(fd) {
				holders = append(holders, n)
			}
		}
	}
	return holders, nil
}
