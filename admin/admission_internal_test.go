package admin

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/credentials"
)

func TestRetryAfterFor(t *testing.T) {
	for _, c := range []struct {
		svc         time.Duration
		shed, limit int
		want        time.Duration
	}{
		{0, 1, 8, minRetryAfter},                     // nothing measured yet
		{10 * time.Millisecond, 8, 8, minRetryAfter}, // less than the half of the waiting room: one round
		// The waiting room full (8 a slot): the rounds until half of it
		// is free, 40 of 72, five of eight.
		{10 * time.Millisecond, 64, 8, 50 * time.Millisecond},
		{10 * time.Millisecond, 96, 8, 90 * time.Millisecond}, // 72 of 104 ahead
		{100 * time.Millisecond, 800, 8, maxRetryAfter},
		{10 * time.Millisecond, 8, 0, 50 * time.Millisecond}, // a zero limit counts as one: 9-4 ahead
	} {
		if got := retryAfterFor(c.svc, c.shed, c.limit); got != c.want {
			t.Errorf("retryAfterFor(%v, %d, %d) = %v, want %v", c.svc, c.shed, c.limit, got, c.want)
		}
	}
}

// TestAcquireAnswersBeforeDeadline: a Connect waiting for a slot whose
// caller's deadline comes before queueWait is refused with a retry-after
// in time, not left to run out (its caller then tries elsewhere; a busy
// refusal keeps it on this instance). Base: "acquire = false, 0s".
func TestAcquireAnswersBeforeDeadline(t *testing.T) {
	a := newAdmission(1)
	if ok, _ := a.acquire(t.Context()); !ok {
		t.Fatal("the one slot was refused")
	}
	ctx, cancel := context.WithTimeout(t.Context(), queueWait/4)
	defer cancel()
	ok, after := a.acquire(ctx)
	if ok || after <= 0 {
		t.Fatalf("acquire = %v, %v; want a refusal with a retry-after before the caller's deadline", ok, after)
	}
	if d := waitFor(context.Background()); d != queueWait {
		t.Errorf("no deadline: wait %v, want %v", d, queueWait)
	}
}

// heldCreds is a TransportCredentials whose server handshake reads one
// byte from the client, then "computes" until gate lets it go, recording
// how many computed at once.
type heldCreds struct {
	credentials.TransportCredentials
	gate     chan struct{}
	in, most atomic.Int32
}

func (h *heldCreds) ServerHandshake(c net.Conn) (net.Conn, credentials.AuthInfo, error) {
	if _, err := c.Read(make([]byte, 1)); err != nil {
		return nil, nil, err
	}
	n := h.in.Add(1)
	for {
		m := h.most.Load()
		if n <= m || h.most.CompareAndSwap(m, n) {
			break
		}
	}
	<-h.gate
	h.in.Add(-1)
	return c, nil, nil
}

// handshake runs l's server handshake on one end of a pipe and returns
// the client's end and the handshake's result.
func handshake(l credentials.TransportCredentials) (net.Conn, chan error) {
	srv, cli := net.Pipe()
	res := make(chan error, 1)
	go func() {
		_, _, err := l.ServerHandshake(srv)
		res <- err
	}()
	return cli, res
}

// At most the bound of handshakes compute at once, however many are
// under way: one waiting for its client holds no slot. A handshake that
// waits longer than the wait for a slot fails (ErrHandshakeBusy) and is
// counted.
func TestHandshakesBounded(t *testing.T) {
	h := &heldCreds{gate: make(chan struct{})}
	var shed atomic.Int32
	l := limitHandshakes(h, 2, time.Minute, func() { shed.Add(1) })
	for range 3 { // under way, waiting for their clients
		cli, _ := handshake(l)
		defer cli.Close()
	}
	var busy []chan error
	for range 4 {
		cli, res := handshake(l)
		defer cli.Close()
		go cli.Write([]byte{1})
		busy = append(busy, res)
	}
	for h.in.Load() < 2 { // two compute although three more are under way
		time.Sleep(time.Millisecond)
	}
	for range 4 {
		h.gate <- struct{}{}
	}
	for _, res := range busy {
		if err := <-res; err != nil {
			t.Error(err)
		}
	}
	if m := h.most.Load(); m != 2 {
		t.Errorf("%d handshakes computed at once, want the bound, 2", m)
	}

	// Both slots held: the next gives up after its wait.
	l = limitHandshakes(h, 2, 10*time.Millisecond, func() { shed.Add(1) })
	var held []chan error
	for range 2 {
		cli, res := handshake(l)
		defer cli.Close()
		go cli.Write([]byte{1})
		held = append(held, res)
	}
	for h.in.Load() < 2 {
		time.Sleep(time.Millisecond)
	}
	cli, res := handshake(l)
	defer cli.Close()
	go cli.Write([]byte{1})
	if err := <-res; !errors.Is(err, ErrHandshakeBusy) {
		t.Errorf("handshake with every slot held: %v, want ErrHandshakeBusy", err)
	}
	if shed.Load() != 1 {
		t.Errorf("%d handshakes counted as given up, want 1", shed.Load())
	}
	h.gate <- struct{}{}
	h.gate <- struct{}{}
	for _, res := range held {
		<-res
	}
}
