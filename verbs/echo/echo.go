// Package echo measures what a transport alone can do: header-only
// request/response round trips between a client and a server that
// busy-poll on their own threads. It drives any verbs device (UD
// SEND_WITH_IMM with a 0-byte payload) and, as the reference, raw UDP
// sockets with GSO and GRO exchanging 28-byte datagrams (the UDP payload
// of a header-only RoCEv2 SEND_WITH_IMM) with the same batching. The
// provider's benchmarks (make bench-verbs) and loadgen's echo floor both
// use it, so they measure the same thing.
package echo

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seqd/seqd/verbs"
)

// Batching: the client keeps Window requests in flight and posts them
// Batch at a time; the server answers what it received Batch at a time.
const (
	Batch  = 64
	Window = 4 * Batch
	slot   = 64 // receive buffer per message: the GRH and room to spare
)

// ErrEcho reports that an echo could not be set up or stalled.
var ErrEcho = errors.New("echo")

// Side is one end of an echo: a batch sender and a non-blocking poller
// that returns how many messages arrived.
type Side interface {
	Send(n int) error
	Poll() (int, error)
	Close()
}

// Run measures round trips between cli and srv: until rounds round trips
// are done (rounds > 0) or for d (d > 0). It returns the round trips done
// and the time they took.
func Run(cli, srv Side, rounds int, d time.Duration) (int, time.Duration, error) {
	var stop atomic.Bool
	var wg sync.WaitGroup
	var srvErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		srvErr = Serve(srv, &stop)
	}()
	n, el, err := Drive(cli, rounds, d)
	stop.Store(true)
	wg.Wait()
	if err == nil && srvErr != nil {
		err = fmt.Errorf("%w: %v", ErrEcho, srvErr)
	}
	return n, el, err
}

// Serve is the echo server's loop: it answers what srv receives, Batch
// at a time, until stop is set or a call fails. The caller chooses the
// thread (Run locks it to one).
func Serve(srv Side, stop *atomic.Bool) error {
	for !stop.Load() {
		k, err := srv.Poll()
		for err == nil && k > 0 {
			n := min(k, Batch)
			err = srv.Send(n)
			k -= n
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// Drive is the client half of Run, on the calling goroutine (locked to
// its thread for the run): it keeps Window requests in flight, Batch at a
// time, against whatever server answers cli, until rounds round trips are
// done (rounds > 0) or for d (d > 0).
func Drive(cli Side, rounds int, d time.Duration) (int, time.Duration, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	sent, done := 0, 0
	var err error
	start := time.Now()
	end := start.Add(d)
	lastAnswer := start
	for iter := 0; err == nil && (rounds <= 0 || done < rounds); iter++ {
		for sent-done+Batch <= Window && (rounds <= 0 || sent < rounds) {
			n := Batch
			if rounds > 0 {
				n = min(n, rounds-sent)
			}
			if err = cli.Send(n); err != nil {
				break
			}
			sent += n
		}
		if err != nil {
			break
		}
		var k int
		k, err = cli.Poll()
		done += k
		if iter&0xff != 0 {
			continue
		}
		now := time.Now()
		if k > 0 {
			lastAnswer = now
		} else if now.Sub(lastAnswer) > 10*time.Second {
			err = fmt.Errorf("stalled: %d of %d answered", done, sent)
		}
		if d > 0 && now.After(end) {
			break
		}
	}
	el := time.Since(start)
	if err != nil {
		return done, el, fmt.Errorf("%w: %v", ErrEcho, err)
	}
	return done, el, nil
}

// PingPong measures n round trips with one request in flight and returns
// the time they took. each, when not nil, gets every round trip's own
// time (two more clock reads per round trip).
func PingPong(cli, srv Side, n int, each func(time.Duration)) (time.Duration, error) {
	var stop atomic.Bool
	var wg sync.WaitGroup
	var srvErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		for !stop.Load() {
			k, err := srv.Poll()
			if err == nil && k > 0 {
				err = srv.Send(k)
			}
			if err != nil {
				srvErr = err
				return
			}
		}
	}()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var err error
	start := time.Now()
	for i := 0; i < n && err == nil; i++ {
		var t time.Time
		if each != nil {
			t = time.Now()
		}
		if err = cli.Send(1); err != nil {
			break
		}
		for k := 0; k == 0 && err == nil; {
			k, err = cli.Poll()
		}
		if each != nil {
			each(time.Since(t))
		}
	}
	el := time.Since(start)
	stop.Store(true)
	wg.Wait()
	if err == nil {
		err = srvErr
	}
	if err != nil {
		return el, fmt.Errorf("%w: %v", ErrEcho, err)
	}
	return el, nil
}

// verbsEnd is one end of the provider echo, made with the public verbs
// API only.
type verbsEnd struct {
	dev  verbs.Device
	pd   verbs.PD
	cq   verbs.CQ
	qp   verbs.QP
	mr   verbs.MR
	ah   verbs.AH
	wc   []verbs.WC
	swr  []verbs.SendWR
	rwr  []verbs.RecvWR
	sges []verbs.SGE
	next int
}

func newVerbsEnd(provider, device string, opts verbs.Options) (_ *verbsEnd, err error) {
	e := &verbsEnd{}
	defer func() {
		if err != nil {
			e.Close()
			err = fmt.Errorf("%w: %s: %v", ErrEcho, provider, err)
		}
	}()
	const depth = 2 * Window
	if e.dev, err = verbs.Open(provider, device, opts); err != nil {
		return nil, err
	}
	if e.pd, err = e.dev.AllocPD(); err != nil {
		return nil, err
	}
	if e.cq, err = e.dev.CreateCQ(4 * depth); err != nil {
		return nil, err
	}
	if e.qp, err = e.pd.CreateQP(verbs.QPInitAttr{Type: verbs.UD, SendCQ: e.cq, RecvCQ: e.cq,
		Cap: verbs.QPCap{MaxSendWR: depth, MaxRecvWR: depth, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		return nil, err
	}
	if err = verbs.BringUpUD(e.qp, verbs.DefaultQKey, 0); err != nil {
		return nil, err
	}
	if e.mr, err = e.pd.RegMR(depth*slot, verbs.AccessLocalWrite); err != nil {
		return nil, err
	}
	e.wc = make([]verbs.WC, depth)
	e.swr = make([]verbs.SendWR, depth)
	e.rwr = make([]verbs.RecvWR, depth)
	e.sges = make([]verbs.SGE, depth)
	return e, e.postRecvs(depth)
}

func (e *verbsEnd) connect(peer *verbsEnd) error {
	ah, err := e.pd.CreateAH(verbs.AHAttr{Dest: peer.qp.Address()})
	if err != nil {
		return fmt.Errorf("%w: address handle: %v", ErrEcho, err)
	}
	e.ah = ah
	for i := range e.swr {
		// Unsignaled: the sender reaps nothing; the provider frees the
		// send slot once the datagram left.
		e.swr[i] = verbs.SendWR{Opcode: verbs.OpSendWithImm, AH: ah, RemoteQPN: peer.qp.QPN(), RemoteQKey: verbs.DefaultQKey}
	}
	return nil
}

// VerbsPair opens two devices of the provider and connects a UD QP on
// each to the other.
func VerbsPair(provider, device string, opts verbs.Options) (cli, srv Side, err error) {
	c, err := newVerbsEnd(provider, device, opts)
	if err != nil {
		return nil, nil, err
	}
	s, err := newVerbsEnd(provider, device, opts)
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	if err = c.connect(s); err == nil {
		err = s.connect(c)
	}
	if err != nil {
		c.Close()
		s.Close()
		return nil, nil, err
	}
	return c, s, nil
}

// postRecvs posts n receives, continuing round the slots. The WRs are
// built once (slot i's WR names slot i's buffer), as a tuned verbs
// application keeps them; a run that wraps round is two posts.
func (e *verbsEnd) postRecvs(n int) error {
	if e.rwr[0].SG == nil {
		for i := range e.sges {
			e.sges[i] = verbs.SGE{Addr: e.mr.Addr() + uint64(i*slot), Length: slot, LKey: e.mr.LKey()}
			e.rwr[i] = verbs.RecvWR{ID: uint64(i), SG: e.sges[i : i+1]}
		}
	}
	for n > 0 {
		k := min(n, len(e.rwr)-e.next)
		if _, err := e.qp.PostRecv(e.rwr[e.next : e.next+k]); err != nil {
			return fmt.Errorf("post receives: %w", err)
		}
		n -= k
		e.next = (e.next + k) % len(e.rwr)
	}
	return nil
}

// Send implements Side: n header-only SEND_WITH_IMMs in one chain.
func (e *verbsEnd) Send(n int) error {
	if k, err := e.qp.PostSend(e.swr[:n]); k != n {
		return fmt.Errorf("post %d sends: %d posted: %w", n, k, err)
	}
	return nil
}

// Poll implements Side, re-posting a RECV for each message received.
func (e *verbsEnd) Poll() (int, error) {
	n, err := e.cq.Poll(e.wc)
	if err != nil {
		return 0, err
	}
	k := 0
	for i := range e.wc[:n] {
		if e.wc[i].Status != verbs.WCSuccess {
			return 0, fmt.Errorf("completion %v", e.wc[i].Status)
		}
		if e.wc[i].Opcode == verbs.WCRecv {
			k++
		}
	}
	if k > 0 {
		return k, e.postRecvs(k)
	}
	return 0, nil
}

// Close implements Side.
func (e *verbsEnd) Close() {
	// A nil field converts to a nil interface: only what was made is closed.
	for _, x := range []interface{ Close() error }{e.ah, e.qp, e.mr, e.cq, e.pd, e.dev} {
		if x != nil {
			x.Close()
		}
	}
}
