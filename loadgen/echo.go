package loadgen

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seqd/seqd/verbs"
)

// The echo floor: what the transport alone can do on this machine, in the
// same run as the modes. Both echoes exchange header-only messages (28-byte
// UDP payloads: a header-only RoCEv2 SEND_WITH_IMM) between a client and a
// server that busy-poll on their own threads, the client keeping
// echoWindow requests in flight and posting them echoBatch at a time —
// the batching of verbs/soft's echo benchmarks.
const (
	echoBatch  = 64
	echoWindow = 4 * echoBatch
	echoSlot   = 64
)

// ErrEcho reports that an echo could not be measured.
var ErrEcho = errors.New("loadgen: echo floor")

// Echo is the measured floor, in round trips per second.
type Echo struct {
	Provider float64 // the verbs provider's header-only UD echo
	RawUDP   float64 // raw UDP sockets with GSO/GRO: echo_floor_ops
}

// echoSide is one end's send and receive path: a batch sender and a
// non-blocking poller that returns the number of messages received.
type echoSide interface {
	send(n int) error
	poll() (int, error)
	close()
}

// runEcho measures round trips per second between cli and srv for d.
func runEcho(cli, srv echoSide, d time.Duration) (float64, error) {
	var stop atomic.Bool
	var wg sync.WaitGroup
	var srvErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		for !stop.Load() {
			k, err := srv.poll()
			for err == nil && k > 0 {
				n := min(k, echoBatch)
				err = srv.send(n)
				k -= n
			}
			if err != nil {
				srvErr = err
				return
			}
		}
	}()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	sent, done := 0, 0
	var err error
	start := time.Now()
	end := start.Add(d)
	lastAnswer := start
	for iter := 0; err == nil; iter++ {
		for sent-done+echoBatch <= echoWindow {
			if err = cli.send(echoBatch); err != nil {
				break
			}
			sent += echoBatch
		}
		var k int
		k, err = cli.poll()
		done += k
		if iter&0xff != 0 {
			continue
		}
		now := time.Now()
		if k > 0 {
			lastAnswer = now
		} else if now.Sub(lastAnswer) > 200*time.Millisecond && sent > done {
			// a lost datagram: forget the window and send afresh
			done = sent
		}
		if now.After(end) {
			break
		}
	}
	el := time.Since(start)
	stop.Store(true)
	wg.Wait()
	if err == nil {
		err = srvErr
	}
	if err != nil {
		return 0, fmt.Errorf("%w: %v", ErrEcho, err)
	}
	return float64(done) / el.Seconds(), nil
}

// MeasureEcho measures both echoes for d each.
func MeasureEcho(provider, device string, d time.Duration) (Echo, error) {
	var e Echo
	cli, srv, err := newVerbsEchoPair(provider, device)
	if err != nil {
		return e, err
	}
	e.Provider, err = runEcho(cli, srv, d)
	cli.close()
	srv.close()
	if err != nil {
		return e, err
	}
	rc, rs, err := newRawEchoPair()
	if err != nil {
		return e, err
	}
	e.RawUDP, err = runEcho(rc, rs, d)
	rc.close()
	rs.close()
	return e, err
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

func newVerbsEnd(provider, device string) (_ *verbsEnd, err error) {
	e := &verbsEnd{}
	defer func() {
		if err != nil {
			e.close()
			err = fmt.Errorf("%w: %s: %v", ErrEcho, provider, err)
		}
	}()
	const depth = 2 * echoWindow
	if e.dev, err = verbs.Open(provider, device, nil); err != nil {
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
	if e.mr, err = e.pd.RegMR(depth*echoSlot, verbs.AccessLocalWrite); err != nil {
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

func newVerbsEchoPair(provider, device string) (echoSide, echoSide, error) {
	cli, err := newVerbsEnd(provider, device)
	if err != nil {
		return nil, nil, err
	}
	srv, err := newVerbsEnd(provider, device)
	if err != nil {
		cli.close()
		return nil, nil, err
	}
	if err = cli.connect(srv); err == nil {
		err = srv.connect(cli)
	}
	if err != nil {
		cli.close()
		srv.close()
		return nil, nil, err
	}
	return cli, srv, nil
}

// postRecvs posts n receives, continuing round the slots.
func (e *verbsEnd) postRecvs(n int) error {
	for i := range n {
		slot := (e.next + i) % len(e.sges)
		e.sges[slot] = verbs.SGE{Addr: e.mr.Addr() + uint64(slot*echoSlot), Length: echoSlot, LKey: e.mr.LKey()}
		e.rwr[i] = verbs.RecvWR{ID: uint64(slot), SG: e.sges[slot : slot+1]}
	}
	e.next = (e.next + n) % len(e.sges)
	if _, err := e.qp.PostRecv(e.rwr[:n]); err != nil {
		return fmt.Errorf("post receives: %w", err)
	}
	return nil
}

func (e *verbsEnd) send(n int) error {
	if k, err := e.qp.PostSend(e.swr[:n]); k != n {
		return fmt.Errorf("post %d sends: %d posted: %w", n, k, err)
	}
	return nil
}

func (e *verbsEnd) poll() (int, error) {
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

func (e *verbsEnd) close() {
	// A nil field converts to a nil interface: only what was made is closed.
	for _, x := range []interface{ Close() error }{e.ah, e.qp, e.mr, e.cq, e.pd, e.dev} {
		if x != nil {
			x.Close()
		}
	}
}
