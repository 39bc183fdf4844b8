package rfp

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

// recordWords is the number of 8-byte words of a response record.
const recordWords = spec.RFPRecordLen / 8

// workerStats are the worker's own counters (wk.Counts has the rest):
// written by the worker only, read at any time.
type workerStats struct {
	sends      atomic.Uint64 // fallback SENDs of fresh answers
	resends    atomic.Uint64 // fallback SENDs of stored answers
	duplicates atomic.Uint64
	malformed  atomic.Uint64
	lost       atomic.Uint64 // CAS on clearing lost to a newer WRITE
	_          [64]byte
}

// client is one admitted client QP: its connection and its blocks.
type client struct {
	worker int
	window int
	tag    uint32 // the session's answer tag
	qp     verbs.QP
	req    verbs.MR // window request slots (remote write)
	resp   verbs.MR // window response records (remote read)
	slots  []uint64 // req as words
	recs   []uint64 // resp as words, recordWords per slot
	// rqPSN is the first PSN the client sends, sqPSN the first the
	// server QP sends.
	rqPSN, sqPSN verbs.PSN
	// Worker-owned from publish on.
	state []spec.RFPSlotState
	// seen is when the last sweep that read every slot of this client
	// started: a WRITE found later landed after it (WRITEs complete
	// nothing on the server, so there is no receive stamp).
	seen verbs.Time
}

func (c *client) close() {
	if c.qp != nil {
		c.qp.Close()
	}
	if c.req != nil {
		c.req.Close()
	}
	if c.resp != nil {
		c.resp.Close()
	}
	c.qp, c.req, c.resp = nil, nil, nil
}

// pending is one request of the batch in hand.
type pending struct {
	c   *client
	pos int
	seq spec.RFPSeq
	act spec.RFPAction
}

type worker struct {
	wk.Base
	s  *Server
	cq verbs.CQ // the send and receive CQ of every server QP of the worker

	clients atomic.Pointer[[]*client] // published copy; read once per sweep
	sweeps  atomic.Uint64

	all []*client // guarded by Server.mu

	// Worker-owned.
	sweep wk.Sweep
	pend  []pending
	wcs   []verbs.WC
	wrs   []verbs.SendWR
	sges  []verbs.SGE
	stats workerStats
}

func newWorker(s *Server, id int) (_ *worker, err error) {
	c := &s.cfg
	w := &worker{s: s} // closed on failure: the named result is nil then
	defer func() {
		if err != nil {
			w.Close()
		}
	}()
	if err = w.Init(&c.Config, id, nil, nil, wk.NoResp, &s.stopped); err != nil {
		return nil, fmt.Errorf("rfp: %w", err)
	}
	cqe := c.MaxQPs * (c.MaxWindow + sendSlack)
	if m := c.Device.Attr().MaxCQE; m > 0 {
		cqe = min(cqe, m)
	}
	if w.cq, err = c.Device.CreateCQ(cqe); err != nil {
		return nil, fmt.Errorf("rfp: worker %d: CQ: %w", id, err)
	}
	w.pend = make([]pending, 0, c.Batch)
	w.wcs = make([]verbs.WC, 64)
	w.wrs = make([]verbs.SendWR, c.Batch)
	w.sges = make([]verbs.SGE, c.Batch)
	empty := []*client{}
	w.clients.Store(&empty)
	return w, nil
}

// admit creates client QP q's server QP and blocks in pd; spare of the
// worker's clients are about to be released. Called with Server.mu held;
// publish makes it visible to the worker.
func (w *worker) admit(pd verbs.PD, q handshake.Endpoint, window int, tag uint32, spare int) (c *client, err error) {
	if len(w.all)-spare >= w.s.cfg.MaxQPs {
		return nil, fmt.Errorf("%w: rfp worker %d serves %d client QPs", dataplane.ErrNoCapacity, w.ID, len(w.all))
	}
	c = &client{worker: w.ID, window: window, tag: tag, state: make([]spec.RFPSlotState, window),
		rqPSN: verbs.RandomPSN(), sqPSN: verbs.RandomPSN(), seen: verbs.Now()}
	defer func() {
		if err != nil {
			c.close()
		}
	}()
	if c.qp, err = pd.CreateQP(verbs.QPInitAttr{Type: verbs.RC, SendCQ: w.cq, RecvCQ: w.cq,
		Cap: verbs.QPCap{MaxSendWR: window + sendSlack, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: spec.RFPRecordLen}}); err != nil {
		return nil, fmt.Errorf("%w: rfp worker %d: RC QP: %v", dataplane.ErrUnavailable, w.ID, err)
	}
	if c.req, err = pd.RegMR(window*spec.RFPSlotLen, verbs.AccessLocalWrite|verbs.AccessRemoteWrite); err != nil {
		return nil, fmt.Errorf("%w: rfp worker %d: request block: %v", dataplane.ErrUnavailable, w.ID, err)
	}
	if c.resp, err = pd.RegMR(window*spec.RFPRecordLen, verbs.AccessRemoteRead); err != nil {
		return nil, fmt.Errorf("%w: rfp worker %d: response block: %v", dataplane.ErrUnavailable, w.ID, err)
	}
	if c.slots, err = words(c.req, window); err != nil {
		return nil, err
	}
	if c.recs, err = words(c.resp, window*recordWords); err != nil {
		return nil, err
	}
	for i := range c.slots {
		atomic.StoreUint64(&c.slots[i], 0)
	}
	for i := range c.recs {
		atomic.StoreUint64(&c.recs[i], 0)
	}
	if err = verbs.Connect(c.qp, verbs.ConnectAttr{Remote: q.Addr, RemoteQPN: q.QPN, RQPSN: c.rqPSN, SQPSN: c.sqPSN,
		Access: verbs.AccessRemoteWrite | verbs.AccessRemoteRead}); err != nil {
		return nil, fmt.Errorf("%w: connect RC QP to %v %v: %v", dataplane.ErrInvalidArgument, q.Addr, q.QPN, err)
	}
	w.all = append(w.all, c)
	return c, nil
}

// words views n 8-byte words of r.
func words(r verbs.MR, n int) ([]uint64, error) {
	b := r.Bytes()
	if len(b) < 8*n || uintptr(unsafe.Pointer(&b[0]))%8 != 0 {
		return nil, fmt.Errorf("%w: rfp: a region is not 8-byte aligned", dataplane.ErrUnavailable)
	}
	return unsafe.Slice((*uint64)(unsafe.Pointer(&b[0])), n), nil
}

// remove stops serving c (its QP is in ERR): the next sweep no longer
// lists it. Called with Server.mu held.
func (w *worker) remove(c *client) {
	for i, x := range w.all {
		if x == c {
			w.all = append(w.all[:i], w.all[i+1:]...)
			break
		}
	}
	w.publish()
}

// publish hands the worker a fresh copy of its client list.
func (w *worker) publish() {
	cs := append([]*client(nil), w.all...)
	w.clients.Store(&cs)
}

// Close releases the worker's CQ (its clients' QPs are closed first).
func (w *worker) Close() {
	wk.CloseAll(w.cq)
	w.cq = nil
	w.Base.Close()
}

// Run is the worker's loop. It returns when the server stops.
func (w *worker) Run() {
	defer w.Pin()()
	idle := wk.Idle{Spin: w.s.cfg.Spin, MaxSleep: w.s.cfg.MaxSleep}
	for !w.s.stopped.Load() {
		// Polling the CQ moves the provider's packets on this thread
		// (the userspace provider receives on the poller) and reaps the
		// fallback SENDs.
		w.reap()
		if w.collect() == 0 {
			idle.Wait(time.Since(w.s.start))
			continue
		}
		idle.Busy()
		w.batch()
	}
}

// reap polls the CQ: every fallback SEND is signaled (they are rare), so
// a completion frees its own send queue entry; failures are counted.
func (w *worker) reap() {
	for {
		n, err := w.cq.Poll(w.wcs)
		if err != nil || n == 0 {
			return
		}
		for i := range w.wcs[:n] {
			if st := w.wcs[i].Status; st != verbs.WCSuccess && st != verbs.WCWRFlushErr {
				w.Drops[wk.DropSend].Add(1)
			}
		}
		if n < len(w.wcs) {
			return
		}
	}
}

// collect sweeps the published clients' slots, from where the last sweep
// stopped, until the batch is full. Each request found is decoded, run
// through its slot's state, and its slot cleared; a new seq invalidates
// the slot's record at once. It returns the batch size.
func (w *worker) collect() int {
	w.sweeps.Add(1)
	clients := *w.clients.Load()
	w.pend = w.pend[:0]
	st := &w.stats
	for c, pos := range wk.Slots(&w.sweep, clients) {
		p := &c.slots[pos]
		word := atomic.LoadUint64(p)
		if word == 0 {
			continue
		}
		var b [spec.RFPSlotLen]byte
		binary.NativeEndian.PutUint64(b[:], word)
		sl, err := spec.DecodeRFPSlot(b[:])
		if !atomic.CompareAndSwapUint64(p, word, 0) {
			st.lost.Add(1) // a newer WRITE landed: the next sweep takes it
		}
		if err != nil {
			st.malformed.Add(1)
			continue
		}
		act := c.state[pos].Take(sl)
		switch act {
		case spec.RFPIgnore:
			st.duplicates.Add(1)
			continue
		case spec.RFPAnswer, spec.RFPAnswerSend:
			// The record no longer answers the last request read.
			atomic.StoreUint64(&c.recs[pos*recordWords], 0)
		}
		if !w.sweep.Fresh(c.seen) {
			w.Drops[wk.DropExpired].Add(1)
			continue
		}
		w.pend = append(w.pend, pending{c: c, pos: pos, seq: sl.Seq, act: act})
		if len(w.pend) == cap(w.pend) {
			break
		}
	}
	return len(w.pend)
}

// Window and Seen make a client wk.Swept.
func (c *client) Window() int       { return c.window }
func (c *client) Seen() *verbs.Time { return &c.seen }

// batch claims once for the collected requests that need a value, writes
// their records, and SENDs the records asked for, one chain per client
// QP.
func (w *worker) batch() {
	defer func() {
		clear(w.pend)
		w.pend = w.pend[:0]
	}()
	fresh := 0
	for i := range w.pend {
		if w.pend[i].act != spec.RFPResend {
			fresh++
		}
	}
	var first uint64
	if fresh > 0 {
		var ok bool
		if first, ok = w.Claim(w.sweep.Oldest, fresh); !ok {
			w.keep(spec.RFPResend)
		}
	}
	if f := w.Stall.Load(); f != nil {
		(*f)()
	}
	if !w.Fresh(w.sweep.Oldest) { // and samples the service time
		// Too late: the claimed values are skipped (never handed out).
		w.Drops[wk.DropLate].Add(uint64(len(w.pend)))
		return
	}
	v := first
	written := 0
	for i := range w.pend {
		p := &w.pend[i]
		if p.act == spec.RFPResend {
			continue
		}
		ws, _ := spec.RFPRecordWords(p.c.tag, p.seq, v) // seq from a decoded slot: valid
		r := p.c.recs[p.pos*recordWords : (p.pos+1)*recordWords]
		// value, check, tail, then head: a READ that sees the head sees
		// the rest (PROTOCOL.md, "RFP: torn reads").
		atomic.StoreUint64(&r[1], ws[1])
		atomic.StoreUint64(&r[2], ws[2])
		atomic.StoreUint64(&r[3], ws[3])
		atomic.StoreUint64(&r[0], ws[0])
		p.c.state[p.pos].Answer(v)
		v++
		written++
	}
	if written > 0 {
		w.Batches.Add(1)
		w.Requests.Add(uint64(written))
	}
	w.keep(spec.RFPAnswerSend, spec.RFPResend)
	w.send()
}

// keep keeps only the pending requests whose action is one of acts.
func (w *worker) keep(acts ...spec.RFPAction) {
	k := 0
	for _, p := range w.pend {
		for _, a := range acts {
			if p.act == a {
				w.pend[k] = p
				k++
				break
			}
		}
	}
	clear(w.pend[k:])
	w.pend = w.pend[:k]
}

// send posts the fallback SENDs of the pending requests: each carries its
// slot's record, inlined from the response block (written by this worker
// only), one chain per client QP.
func (w *worker) send() {
	if len(w.pend) == 0 {
		return
	}
	if b, ok := w.s.cfg.Device.(verbs.DoorbellBatcher); ok {
		b.HoldDoorbell()
		defer b.RingDoorbell()
	}
	for i := 0; i < len(w.pend); {
		c := w.pend[i].c
		n := 0
		for ; i < len(w.pend) && w.pend[i].c == c; i++ {
			p := &w.pend[i]
			imm, _ := spec.RFPReplyImm(p.pos) // pos < window <= RFPMaxWindow
			w.sges[n] = verbs.SGE{Addr: c.resp.Addr() + uint64(p.pos*spec.RFPRecordLen), Length: spec.RFPRecordLen, LKey: c.resp.LKey()}
			w.wrs[n] = verbs.SendWR{Opcode: verbs.OpSendWithImm, Flags: verbs.Inline | verbs.Signaled,
				SG: w.sges[n : n+1], Imm: imm}
			if p.act == spec.RFPResend {
				w.stats.resends.Add(1)
			} else {
				w.stats.sends.Add(1)
			}
			n++
		}
		if posted, err := c.qp.PostSend(w.wrs[:n]); err != nil {
			w.Drops[wk.DropSend].Add(uint64(n - posted))
		}
	}
}
