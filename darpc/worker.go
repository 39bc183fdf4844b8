package darpc

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/seqd/seqd/admin/handshake"
	"github.com/seqd/seqd/dataplane"
	wk "github.com/seqd/seqd/internal/worker"
	"github.com/seqd/seqd/spec"
	"github.com/seqd/seqd/verbs"
)

// Work request IDs on a worker's CQ: the kind (send or receive), the
// connection's slot in the worker's table and its generation (so that a
// completion of a released connection never lands on the next one in the
// slot), and the buffer.
const (
	bufBits  = 16
	slotBits = 24
	genBits  = 16
	sendBit  = uint64(1) << 63
	recvLen  = 32 // receive buffer: a call is DaRPCCallLen; a longer SEND fails on the client's QP
	sendLen  = spec.DaRPCAnswerLen
	maxBatch = 64 // completions polled (and messages answered) per batch
)

func wrID(send bool, slot int, gen uint16, buf int) uint64 {
	id := uint64(gen)<<(slotBits+bufBits) | uint64(slot)<<bufBits | uint64(buf)
	if send {
		id |= sendBit
	}
	return id
}

func splitID(id uint64) (send bool, slot int, gen uint16, buf int) {
	return id&sendBit != 0, int(id>>bufBits) & (1<<slotBits - 1), uint16(id >> (slotBits + bufBits)), int(id & (1<<bufBits - 1))
}

// dropSendFull is the mode's own drop reason (after internal/worker's):
// the connection's send queue was full, so the calls got no answer and
// the connection was failed.
const dropSendFull = wk.NumDrops

// ownStats are the mode's own counters: written by the worker only, read
// at any time.
type ownStats struct {
	malformed, refused, flushed, unknown atomic.Uint64
}

// conn is one client connection: a server RC QP on a worker's CQ, its
// receive ring and its answer ring.
type conn struct {
	w       *worker
	slot    int
	gen     uint16
	qp      verbs.QP
	mr      verbs.MR // window receive buffers, then sqDepth answer buffers
	window  int
	sqDepth int
	// worker-owned
	posted, completed uint64 // answers
	dead              bool   // the QP failed: nothing more is posted on it
	rep               []verbs.RecvWR
	rsge              []verbs.SGE
	swrs              []verbs.SendWR
	ssge              []verbs.SGE
	calls             []int // calls answered by swrs[i]
}

func (c *conn) sendOff(i int) int { return c.window*recvLen + i*sendLen }

// pending is one call message of a batch.
type pending struct {
	c     *conn
	id    uint64
	count int
}

type limbo struct {
	c     *conn
	round uint64
	set   bool // round was read after the table without c was published
}

type worker struct {
	wk.Base // identity, pinning, claims, the counts
	s       *Server
	cq      verbs.CQ

	table atomic.Pointer[[]*conn] // by slot; published copy, loaded once per round
	// round is odd while the worker handles a batch (from before it loads
	// the table until it no longer touches any conn of it).
	round atomic.Uint64
	// busy counts polls in a row that found completions (DaRPC's load
	// measure).
	busy atomic.Uint64

	// guarded by Server.mu
	live   []*conn // by slot
	nconns int
	gens   []uint16
	free   []int
	limbo  []limbo
	cqUsed int

	// worker-owned
	wcs     []verbs.WC
	pend    []pending
	touched []*conn
	oldest  verbs.Time
	own     ownStats
}

func newWorker(s *Server, id int) (*worker, error) {
	c := &s.cfg
	w := &worker{s: s}
	// No response QPs: answers leave on the clients' own connections.
	if err := w.Init(&c.Config, id, s.PD, nil, 0, &s.stopped, "send_queue_full"); err != nil {
		return nil, err
	}
	var err error
	if w.cq, err = c.Device.CreateCQ(c.CQDepth + cqSlack); err != nil {
		return nil, fmt.Errorf("darpc: worker %d: CQ: %w", id, err)
	}
	w.live = make([]*conn, c.MaxClients)
	w.gens = make([]uint16, c.MaxClients)
	for i := c.MaxClients - 1; i >= 0; i-- {
		w.free = append(w.free, i)
	}
	w.wcs = make([]verbs.WC, maxBatch)
	w.pend = make([]pending, 0, maxBatch)
	w.touched = make([]*conn, 0, maxBatch)
	w.publish()
	return w, nil
}

// admit creates connection q's server QP on this worker. Called with
// Server.mu held; publish makes it visible to the worker.
func (w *worker) admit(q handshake.Endpoint, window int, psn verbs.PSN) (c *conn, err error) {
	sq := 4 * window
	c = &conn{w: w, window: window, sqDepth: sq}
	defer func() {
		if err != nil {
			c.close()
		}
	}()
	if c.qp, err = w.s.PD.CreateQP(verbs.QPInitAttr{Type: verbs.RC, SendCQ: w.cq, RecvCQ: w.cq,
		Cap: verbs.QPCap{MaxSendWR: sq, MaxRecvWR: window, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		return nil, fmt.Errorf("%w: darpc QP: %v", dataplane.ErrUnavailable, err)
	}
	if c.mr, err = w.s.PD.RegMR(window*recvLen+sq*sendLen, verbs.AccessLocalWrite); err != nil {
		return nil, fmt.Errorf("%w: darpc buffers: %v", dataplane.ErrUnavailable, err)
	}
	if err = verbs.Connect(c.qp, verbs.ConnectAttr{Remote: q.Addr, RemoteQPN: q.QPN, RQPSN: psn, SQPSN: psn,
		Timeout: rcTimeout, RetryCnt: rcRetryCnt}); err != nil {
		return nil, fmt.Errorf("%w: connect to %v %v: %v", dataplane.ErrFailedPrecondition, q.Addr, q.QPN, err)
	}
	c.slot = w.free[len(w.free)-1]
	c.gen = w.gens[c.slot]
	c.rep = make([]verbs.RecvWR, 0, window)
	c.rsge = make([]verbs.SGE, window)
	c.swrs = make([]verbs.SendWR, 0, min(window, maxBatch))
	c.ssge = make([]verbs.SGE, min(window, maxBatch))
	c.calls = make([]int, 0, min(window, maxBatch))
	for i := range window {
		c.addRecv(i)
	}
	if _, err = c.qp.PostRecv(c.rep); err != nil {
		return nil, fmt.Errorf("%w: darpc receives: %v", dataplane.ErrUnavailable, err)
	}
	c.rep = c.rep[:0]
	w.free = w.free[:len(w.free)-1]
	w.live[c.slot] = c
	w.nconns++
	w.cqUsed += window + sq
	return c, nil
}

// addRecv adds receive buffer i to the connection's re-post chain.
func (c *conn) addRecv(i int) {
	c.rsge[i] = verbs.SGE{Addr: c.mr.Addr() + uint64(i*recvLen), Length: recvLen, LKey: c.mr.LKey()}
	c.rep = append(c.rep, verbs.RecvWR{ID: wrID(false, c.slot, c.gen, i), SG: c.rsge[i : i+1]})
}

func (c *conn) close() {
	if c.qp != nil {
		c.qp.Close()
	}
	if c.mr != nil {
		c.mr.Close()
	}
}

// release stops serving c: its QP moves to ERR at once (flushing its
// receives) and it is destroyed once the worker finished every batch
// that could still touch it. Called with Server.mu held; the caller
// publishes.
func (w *worker) release(c *conn) {
	if w.live[c.slot] != c {
		return
	}
	c.qp.Modify(&verbs.QPAttr{State: verbs.StateErr}, verbs.AttrState)
	w.live[c.slot] = nil
	w.nconns--
	w.limbo = append(w.limbo, limbo{c: c})
}

// reclaim destroys released connections no batch can still touch: those
// released while the worker was idle (an even round), or whose batch has
// ended since. Called with Server.mu held, after publish.
func (w *worker) reclaim() {
	now := w.round.Load()
	keep := w.limbo[:0]
	for _, l := range w.limbo {
		if l.set && (l.round%2 == 0 || now > l.round) {
			l.c.close()
			w.gens[l.c.slot]++
			w.free = append(w.free, l.c.slot)
			w.cqUsed -= l.c.window + l.c.sqDepth
			continue
		}
		keep = append(keep, l)
	}
	w.limbo = keep
}

// publish hands the worker a fresh copy of its table. Called with
// Server.mu held.
func (w *worker) publish() {
	t := append([]*conn(nil), w.live...)
	w.table.Store(&t)
	// A batch that started before this store may still use the old
	// table: the round read after it tells when that batch is over.
	r := w.round.Load()
	for i := range w.limbo {
		if !w.limbo[i].set {
			w.limbo[i].round, w.limbo[i].set = r, true
		}
	}
}

// toErr moves every QP of the worker to ERR (after the worker exited).
func (w *worker) toErr() {
	for _, c := range w.live {
		if c != nil {
			c.qp.Modify(&verbs.QPAttr{State: verbs.StateErr}, verbs.AttrState)
		}
	}
}

// Close releases the worker's connections and CQ (after Run returned).
func (w *worker) Close() {
	for i, c := range w.live {
		if c != nil {
			c.close()
			w.live[i] = nil
		}
	}
	for _, l := range w.limbo {
		l.c.close()
	}
	w.limbo = nil
	w.Base.Close()
	if w.cq != nil {
		w.cq.Close()
	}
}

// Run is the cluster head's loop: poll the cluster's CQ, answer what it
// found, block on the CQ when idle for a while. It returns when the
// server stops.
func (w *worker) Run() {
	defer w.Pin()()
	idleSince := time.Time{}
	for !w.s.stopped.Load() {
		w.round.Add(1) // odd: in a batch
		n := w.step()
		w.round.Add(1)
		if n > 0 {
			w.busy.Add(1)
			idleSince = time.Time{}
			continue
		}
		w.busy.Store(0)
		now := time.Now()
		if idleSince.IsZero() {
			idleSince = now
		}
		if w.s.cfg.Spin < 0 || now.Sub(idleSince) < w.s.cfg.Spin {
			runtime.Gosched()
			continue
		}
		w.cq.Wait(w.s.ctx)
		idleSince = time.Time{}
	}
}

// step polls one batch of completions and handles it; it returns how
// many completions it polled.
func (w *worker) step() int {
	table := *w.table.Load()
	n, err := w.cq.Poll(w.wcs)
	if err != nil || n == 0 {
		return 0
	}
	w.pend = w.pend[:0]
	w.touched = w.touched[:0]
	w.oldest = verbs.Now()
	total := 0
	for i := range w.wcs[:n] {
		wc := &w.wcs[i]
		send, slot, gen, buf := splitID(wc.ID)
		var c *conn
		if slot < len(table) {
			c = table[slot]
		}
		if c == nil || c.gen != gen {
			w.own.unknown.Add(1)
			continue
		}
		if send {
			c.completed++
			if wc.Status != verbs.WCSuccess {
				if wc.Status != verbs.WCWRFlushErr {
					w.Drops[wk.DropSend].Add(1)
				}
				if !c.dead {
					w.Log.Warn("darpc: connection failed", "qpn", c.qp.QPN(), "status", wc.Status)
				}
				c.dead = true
			}
			continue
		}
		if wc.Status != verbs.WCSuccess {
			if wc.Status == verbs.WCWRFlushErr {
				w.own.flushed.Add(1)
			} else {
				w.own.malformed.Add(1)
			}
			c.dead = true // the QP is in ERR: its receives are gone
			continue
		}
		if buf >= c.window {
			w.own.unknown.Add(1)
			continue
		}
		off := buf * recvLen
		var m spec.DaRPCMsg
		if int(wc.ByteLen) <= recvLen {
			m, err = spec.DecodeDaRPCCall(c.mr.Bytes()[off : off+int(wc.ByteLen)])
		} else {
			err = spec.ErrBadLength
		}
		if len(c.rep) == 0 {
			w.touched = append(w.touched, c)
		}
		c.addRecv(buf) // the call is decoded: the buffer goes back
		if err != nil || m.Count > c.window {
			w.own.malformed.Add(1)
			continue
		}
		if wc.Arrived != 0 && wc.Arrived < w.oldest {
			w.oldest = wc.Arrived
		}
		w.pend = append(w.pend, pending{c: c, id: m.ID, count: m.Count})
		total += m.Count
	}
	// Receives first, one chain per connection: the client's next calls
	// find them.
	for _, c := range w.touched {
		if !c.dead {
			if _, err := c.qp.PostRecv(c.rep); err != nil {
				c.dead = true
			}
		}
		c.rep = c.rep[:0]
	}
	if len(w.pend) > 0 {
		w.answer(total)
	}
	return n
}

// answer claims total values once for the batch's call messages and
// answers each with one SEND, one chain (doorbell) per connection, all
// under one held doorbell where the device batches. A batch older than
// spec.MaxResidence is refused instead: before the claim, or with its
// claimed values skipped just before the doorbell.
func (w *worker) answer(total int) {
	kind := spec.DaRPCValues
	// Base.Claim counts the calls it gives up (expired, oracle): they are
	// refused.
	first, ok := w.Claim(w.oldest, total)
	if !ok {
		kind = spec.DaRPCRefused
	}
	w.touched = w.touched[:0]
	off := uint64(0)
	for i := range w.pend {
		p := &w.pend[i]
		c := p.c
		if c.dead {
			continue
		}
		if c.posted-c.completed >= uint64(c.sqDepth) || len(c.swrs) == cap(c.swrs) {
			// Only a client far beyond its window, or one not
			// acknowledging answers, gets here: its connection fails.
			w.Drops[dropSendFull].Add(uint64(p.count))
			c.dead = true
			c.qp.Modify(&verbs.QPAttr{State: verbs.StateErr}, verbs.AttrState)
			continue
		}
		if len(c.swrs) == 0 {
			w.touched = append(w.touched, c)
		}
		si := int((c.posted + uint64(len(c.swrs))) % uint64(c.sqDepth))
		o := c.sendOff(si)
		spec.PutDaRPCAnswer(c.mr.Bytes()[o:o+sendLen], kind, p.id, p.count, first+off) // count checked at decode
		if kind == spec.DaRPCValues {
			off += uint64(p.count)
		}
		k := len(c.swrs)
		c.ssge[k] = verbs.SGE{Addr: c.mr.Addr() + uint64(o), Length: sendLen, LKey: c.mr.LKey()}
		c.swrs = append(c.swrs, verbs.SendWR{ID: wrID(true, c.slot, c.gen, si), Opcode: verbs.OpSend, Flags: verbs.Signaled,
			SG: c.ssge[k : k+1]})
		c.calls = append(c.calls, p.count)
	}
	if f := w.Stall.Load(); f != nil { // tests: a worker descheduled here
		(*f)()
	}
	late := false
	if kind == spec.DaRPCValues && !w.Fresh(w.oldest) { // and samples the service time
		// Too late: the values are skipped (never handed out), the calls
		// refused.
		kind = spec.DaRPCRefused
		late = true
		for _, c := range w.touched {
			for k := range c.swrs {
				o := c.posted + uint64(k)
				off := c.sendOff(int(o % uint64(c.sqDepth)))
				spec.RefuseDaRPCAnswer(c.mr.Bytes()[off : off+sendLen])
			}
		}
	}
	if b, ok := w.s.cfg.Device.(verbs.DoorbellBatcher); ok {
		b.HoldDoorbell()
		defer b.RingDoorbell()
	}
	answered, calls := 0, 0
	for _, c := range w.touched {
		n, err := c.qp.PostSend(c.swrs)
		c.posted += uint64(n)
		for i, k := range c.calls {
			if i < n {
				calls += k
			} else {
				w.Drops[wk.DropSend].Add(uint64(k))
			}
		}
		if err != nil {
			c.dead = true
		}
		answered += n
		c.swrs, c.calls = c.swrs[:0], c.calls[:0]
	}
	switch {
	case kind == spec.DaRPCValues:
		w.Batches.Add(1)
		w.Requests.Add(uint64(calls))
	case late:
		w.own.refused.Add(uint64(answered))
		w.Drops[wk.DropLate].Add(uint64(calls))
	default:
		w.own.refused.Add(uint64(answered))
	}
	for i := range w.pend {
		w.pend[i] = pending{}
	}
}
