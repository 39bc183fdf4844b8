package herd

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/seqd/seqd/admin/handshake"
	"github.com/seqd/seqd/dataplane"
	wk "github.com/seqd/seqd/internal/worker"
	"github.com/seqd/seqd/spec"
	"github.com/seqd/seqd/verbs"
)

const slotLen = spec.SlotLen

// workerStats are what a worker counts besides internal/worker's Counts
// (whose drop reasons are all herd's): written by the worker only, read
// at any time.
type workerStats struct {
	duplicates atomic.Uint64 // WRITEs of a (slot, seq) already answered, or older
	ahead      atomic.Uint64 // WRITEs of a seq more than spec.HERDMaxStep past the last answered
	malformed  atomic.Uint64 // slots that did not decode
	lost       atomic.Uint64 // CAS on zeroing lost to a newer WRITE
	_          [64]byte
}

// hclient is one admitted client QP: its block of window slots on a
// worker, in an MR of a protection domain of its own with the server UC
// QP connected to the client's, so no other QP can write the block (a
// NIC refuses an R_Key of another PD).
type hclient struct {
	worker int
	window int
	pd     verbs.PD
	mr     verbs.MR // the block: window slots, remote write only
	words  []uint64 // the block as 8-byte slots
	uc     verbs.QP
	ah     verbs.AH
	qpn    verbs.QPN
	qkey   uint32     // the session's answer Q_Key
	last   []spec.Seq // per position: last seq answered, 0 for none; worker-owned
	// seen is when the last sweep that read every slot of this client
	// started (worker-owned; set at admission before publish): a WRITE
	// found later landed after it, so it bounds the request's arrival
	// from below (WRITEs complete nothing, so there is no receive stamp).
	seen verbs.Time
}

type pending struct {
	c   *hclient
	pos int
	seq spec.Seq
}

type limbo struct {
	c     *hclient
	sweep uint64
}

type worker struct {
	wk.Base
	s *Server

	ucCQ   verbs.CQ
	sendCQ verbs.CQ

	clients atomic.Pointer[[]*hclient] // published copy; read once per sweep
	sweeps  atomic.Uint64

	// guarded by Server.mu
	all    []*hclient
	limbo  []limbo
	nclose []verbs.QP

	sweep wk.Sweep // where the next sweep starts; the batch's arrival bound (Oldest)
	wcs   []verbs.WC
	wrs   []verbs.SendWR
	sges  []verbs.SGE
	pend  []pending
	stats workerStats
}

func newWorker(s *Server, id int) (_ *worker, err error) {
	c := &s.cfg
	w := &worker{s: s} // closed on failure: the named result is nil then
	w.ID = id
	defer func() {
		if err != nil {
			w.Close()
		}
	}()
	dev := c.Device
	// One CQ for the UC QPs (whose plain WRITEs complete nothing) and the
	// response QPs: a batch is one poll and one post.
	if w.ucCQ, err = dev.CreateCQ(64 + c.RespQPs*c.SendDepth); err != nil {
		return nil, fmt.Errorf("herd: worker %d: CQ: %w", id, err)
	}
	w.sendCQ = w.ucCQ
	if err = w.InitShared(&c.Config, id, s.PD, w.sendCQ, spec.HERDAnswerLen, &s.stopped); err != nil {
		return nil, fmt.Errorf("herd: %w", err)
	}
	w.wcs = make([]verbs.WC, 16)
	w.wrs = make([]verbs.SendWR, c.Batch)
	w.sges = make([]verbs.SGE, c.Batch)
	w.pend = make([]pending, 0, c.Batch)
	empty := []*hclient{}
	w.clients.Store(&empty)
	return w, nil
}

// admit gives client QP q a protection domain of its own holding a
// block of window slots and a server UC QP connected to the client's.
// Released clients count against MaxQPs until reclaimed. Called with
// Server.mu held; publish makes it visible to the worker.
func (w *worker) admit(write, recv handshake.Endpoint, ah verbs.AH, window int) (c *hclient, err error) {
	w.reclaim()
	if len(w.all)+len(w.limbo) >= w.s.cfg.MaxQPs {
		return nil, fmt.Errorf("%w: worker %d serves %d client QPs", ErrNoRoom, w.ID, w.s.cfg.MaxQPs)
	}
	c = &hclient{worker: w.ID, window: window, ah: ah, qpn: recv.QPN, last: make([]spec.Seq, window), seen: verbs.Now()}
	defer func() {
		if err != nil {
			c.close()
		}
	}()
	if c.pd, err = w.s.cfg.Device.AllocPD(); err != nil {
		return nil, fmt.Errorf("%w: herd worker %d: protection domain: %v", dataplane.ErrUnavailable, w.ID, err)
	}
	if c.mr, err = c.pd.RegMR(window*slotLen, verbs.AccessLocalWrite|verbs.AccessRemoteWrite); err != nil {
		return nil, fmt.Errorf("%w: herd worker %d: request block: %v", dataplane.ErrUnavailable, w.ID, err)
	}
	b := c.mr.Bytes()
	if len(b) < window*slotLen || uintptr(unsafe.Pointer(&b[0]))%8 != 0 {
		return nil, fmt.Errorf("%w: herd worker %d: request block is not 8-byte aligned", dataplane.ErrUnavailable, w.ID)
	}
	c.words = unsafe.Slice((*uint64)(unsafe.Pointer(&b[0])), window)
	for i := range c.words {
		atomic.StoreUint64(&c.words[i], 0)
	}
	if c.uc, err = c.pd.CreateQP(verbs.QPInitAttr{Type: verbs.UC, SendCQ: w.ucCQ, RecvCQ: w.ucCQ,
		Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		return nil, fmt.Errorf("herd: worker %d: UC QP: %w", w.ID, err)
	}
	if err = verbs.Connect(c.uc, verbs.ConnectAttr{Remote: write.Addr, RemoteQPN: write.QPN, Access: verbs.AccessRemoteWrite}); err != nil {
		return nil, fmt.Errorf("%w: connect UC QP to %v %v: %v", ErrArgument, write.Addr, write.QPN, err)
	}
	w.all = append(w.all, c)
	return c, nil
}

// close releases c's QP, block and PD, in that order (a PD is closed
// last). The worker must no longer see c.
func (c *hclient) close() {
	wk.CloseAll(c.uc, c.mr, c.pd)
	c.uc, c.mr, c.pd, c.words = nil, nil, nil, nil
}

// slot is position pos of c's block.
func (w *worker) slot(c *hclient, pos int) *uint64 { return &c.words[pos] }

// release stops serving c: its UC QP moves to ERR at once (no more WRITEs
// land) and its resources are freed once the worker has finished every
// sweep that could still see it. Called with Server.mu held.
func (w *worker) release(c *hclient) {
	c.uc.Modify(&verbs.QPAttr{State: verbs.StateErr}, verbs.AttrState)
	for i, x := range w.all {
		if x == c {
			w.all = append(w.all[:i], w.all[i+1:]...)
			break
		}
	}
	w.publish()
	w.limbo = append(w.limbo, limbo{c, w.sweeps.Load()})
}

// reclaim frees the released clients no sweep can still see.
func (w *worker) reclaim() {
	now := w.sweeps.Load()
	keep := w.limbo[:0]
	for _, l := range w.limbo {
		if now > l.sweep+1 || w.s.stopped.Load() {
			l.c.close()
			continue
		}
		keep = append(keep, l)
	}
	clear(w.limbo[len(keep):])
	w.limbo = keep
}

// publish hands the worker a fresh copy of its client list.
func (w *worker) publish() {
	cs := append([]*hclient(nil), w.all...)
	w.clients.Store(&cs)
}

// toErr moves every QP of the worker to ERR. Called after the worker
// exited.
func (w *worker) toErr() {
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	e := &verbs.QPAttr{State: verbs.StateErr}
	for _, c := range w.all {
		c.uc.Modify(e, verbs.AttrState)
	}
	if w.Resp != nil {
		w.Resp.ToErr()
	}
}

func (w *worker) Close() {
	for _, c := range w.all {
		c.close()
	}
	for _, l := range w.limbo {
		l.c.close()
	}
	w.all, w.limbo = nil, nil
	w.Base.Close()
	wk.CloseAll(w.ucCQ)
}

// Run is the worker's loop. It returns when the server stops.
func (w *worker) Run() {
	defer w.Pin()()
	idle := wk.Idle{Spin: w.s.cfg.Spin, MaxSleep: w.s.cfg.MaxSleep}
	start := w.s.start
	for !w.s.stopped.Load() {
		// Polling the CQ moves the provider's packets on this thread
		// (the userspace provider receives on the poller) and frees the
		// send queue slots of answers that left; plain WRITEs complete
		// nothing.
		w.reap()
		if w.collect() == 0 {
			idle.Wait(time.Since(start))
			continue
		}
		idle.Busy()
		w.batch()
	}
}

// reap polls the worker's CQ once: send completions free their slots
// (and failed ones are counted); the UC QPs' completions, and those a wait
// for send queue room polled, are of no use.
func (w *worker) reap() {
	for w.Resp.Spilled() > 0 {
		w.Resp.TakeSpilled(w.wcs)
	}
	n, err := w.ucCQ.Poll(w.wcs)
	if err != nil {
		return
	}
	for i := range w.wcs[:n] {
		w.SendDone(&w.wcs[i])
	}
}

// collect sweeps the published clients' slots, from where the last sweep
// stopped, until the batch is full. Each request found is validated,
// checked against its slot's last answered seq (spec.HERDClassify) and
// its slot zeroed. It returns the batch size.
func (w *worker) collect() int {
	w.sweeps.Add(1)
	clients := *w.clients.Load()
	w.pend = w.pend[:0]
	st := &w.stats
	for c, pos := range wk.Slots(&w.sweep, clients) {
		p := w.slot(c, pos)
		word := atomic.LoadUint64(p)
		if word == 0 {
			continue
		}
		var b [slotLen]byte
		binary.LittleEndian.PutUint64(b[:], word)
		sl, err := spec.DecodeSlot(b[:])
		if err != nil {
			st.malformed.Add(1)
			atomic.CompareAndSwapUint64(p, word, 0)
			continue
		}
		switch spec.HERDClassify(c.last[pos], sl.Seq) {
		case spec.StepOld:
			st.duplicates.Add(1) // answered already, or older than what was
			atomic.CompareAndSwapUint64(p, word, 0)
			continue
		case spec.StepAhead:
			// Not the owner's next WRITE (it stays within the step): a
			// stray one, dropped so it cannot push the slot's last seq
			// past the owner's.
			st.ahead.Add(1)
			atomic.CompareAndSwapUint64(p, word, 0)
			continue
		}
		c.last[pos] = sl.Seq
		// Zero the slot BEFORE the reply is posted; a newer WRITE that
		// landed meanwhile is kept for the next sweep.
		if !atomic.CompareAndSwapUint64(p, word, 0) {
			st.lost.Add(1)
		}
		if !w.sweep.Fresh(c.seen) {
			w.Drops[wk.DropExpired].Add(1)
			continue
		}
		w.pend = append(w.pend, pending{c, pos, sl.Seq})
		if len(w.pend) == cap(w.pend) {
			break
		}
	}
	return len(w.pend)
}

// Window and Seen make a client wk.Swept.
func (c *hclient) Window() int       { return c.window }
func (c *hclient) Seen() *verbs.Time { return &c.seen }

// batch claims once for the collected requests and answers them.
func (w *worker) batch() {
	n := len(w.pend)
	first, ok := w.Claim(w.sweep.Oldest, n)
	if ok && w.answer(first) {
		w.Batches.Add(1)
		w.Requests.Add(uint64(n))
	}
	for i := range w.pend {
		w.pend[i] = pending{}
	}
	w.pend = w.pend[:0]
}

// answer posts one UD SEND per pending request, values first.., as one
// chain on the next response QP, unless the batch is by then older than
// spec.MaxResidence: the age is checked after every wait (a full send
// queue, a stall) and immediately before the doorbell. It reports
// whether the answers were posted.
func (w *worker) answer(first uint64) bool {
	n := len(w.pend)
	b, ok := w.Next(n)
	if !ok {
		return false
	}
	for i := range w.pend {
		p := &w.pend[i]
		buf, sge := b.Slot(i)
		binary.BigEndian.PutUint64(buf, first+uint64(i))
		imm, _ := spec.HERDAnswerImm(p.pos, p.seq) // pos < MaxWindow, seq valid: checked
		w.sges[i] = sge
		wr := &w.wrs[i]
		*wr = verbs.SendWR{Opcode: verbs.OpSendWithImm, Flags: verbs.Inline,
			SG: w.sges[i : i+1], Imm: uint32(imm), AH: p.c.ah, RemoteQPN: p.c.qpn, RemoteQKey: p.c.qkey}
	}
	b.Prepare(w.wrs[:n])
	return w.Post(b, w.wrs[:n], w.sweep.Oldest)
}
