package erpc

import (
	"fmt"
	"sync/atomic"

	"github.com/seqd/seqd/internal/claim"
	wk "github.com/seqd/seqd/internal/worker"
	"github.com/seqd/seqd/spec"
	"github.com/seqd/seqd/verbs"
)

// The mode's own drop reasons, after internal/worker's.
const (
	dropWCError = wk.NumDrops + iota
	dropBadOpcode
	dropMalformed
	dropUnknownSource
	dropWrongSession
	dropCredits
	dropStale
	dropBusy
	dropMismatch
	dropBoundary
)

var dropNames = []string{"wc_error", "bad_opcode", "malformed", "unknown_source", "wrong_session",
	"credits", "stale", "busy", "mismatch", "boundary"}

// peer is a session endpoint (a client QP) admitted to a worker: what
// admission fixed (wk.Peer) and what the worker owns: its slots.
type peer struct {
	wk.Peer
	slots   [spec.ERPCSlots]spec.ERPCServerSlot
	inBatch int // packets of the current burst
}

// pending is an answer of the current burst: a request that runs (its
// first value set by layout), a retransmission answered from its slot,
// or a pong.
type pending struct {
	p     *peer
	op    uint8 // spec.ERPCOpAnswer or spec.ERPCOpPong
	slot  int
	rn    uint64
	k     int
	first uint64
	run   bool // ran in this burst: its slot is Done (Undo if never posted)
}

type worker struct {
	wk.Base
	s *Server

	wk.UDRing // the request QP, its CQs and the receive buffers
	// chain collects the batch's re-posts (UDRing.RWRs), posted as one
	// chain.
	chain []verbs.RecvWR

	peers   wk.Peers[peer] // written under Server.mu
	credits int            // credits of the sessions admitted here; Server.mu

	wcs     []verbs.WC
	fresh   []pending // requests that run: claimed together
	out     []pending // every answer of the burst
	sendWRs []verbs.SendWR
	sendSGE []verbs.SGE

	requests, resends, pongs atomic.Uint64

	// off turns optimizations off, one at a time, for the factor
	// analysis (BenchmarkBatchFactors, thesis Table 6.2); none in use.
	off factors
}

// factors are the server's optimizations as a benchmark turns them off:
// each true field is one off.
type factors struct {
	// zeroCopy off: each request is copied out of its receive buffer,
	// into a buffer of its own, before it is read.
	zeroCopy bool
	// prealloc off: each answer is built in a buffer allocated for it,
	// then copied into its registered send slot.
	prealloc bool
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
	if err = w.UDRing.Open(&c.Config, s.PD, c.RecvQueue, recvSlot); err != nil {
		return nil, fmt.Errorf("erpc: worker %d: %w", id, err)
	}
	if err = w.Init(&c.Config, id, s.PD, w.SendCQ, spec.ERPCAnswerLen, &s.stopped, dropNames...); err != nil {
		return nil, fmt.Errorf("erpc: %w", err)
	}
	w.wcs = make([]verbs.WC, c.Batch)
	w.chain = make([]verbs.RecvWR, c.Batch)
	w.fresh = make([]pending, c.Batch)
	w.out = make([]pending, c.Batch)
	w.sendWRs = make([]verbs.SendWR, c.Batch)
	w.sendSGE = make([]verbs.SGE, c.Batch)
	return w, nil
}

func (w *worker) toErr() {
	w.UDRing.ToErr()
	if w.Resp != nil {
		w.Resp.ToErr()
	}
}

// Close destroys the worker's resources; it is not running.
func (w *worker) Close() {
	w.Base.Close()
	w.UDRing.Close()
}

// Run is the worker's loop; it returns when the mode stops.
func (w *worker) Run() {
	defer w.Pin()()
	w.Serve(w.s.ctx, &w.s.stopped, w.s.start, w.s.cfg.Spin, w.wcs,
		func(err error) { w.Log.Error("poll requests", "err", err) }, w.ReapSends, w.batch)
}

// batch serves one polled burst: the receive buffers go back in one
// chain, the values of every request that runs are claimed with one
// claim, and every answer (runs, resends, pongs) leaves in one chain
// on the next response QP. The clock is read once for the burst
// (polled), and again only for the residence check before the doorbell.
func (w *worker) batch(wcs []verbs.WC) {
	drops := w.Drops
	peers := w.peers.Load()
	var last wk.LastPeer[peer] // this batch's
	buf := w.RecvMR.Bytes()
	nfresh, nout, nre, values := 0, 0, 0, 0
	oldest := verbs.Time(0)
	polled := verbs.Now()
	for i := range wcs {
		wc := &wcs[i]
		slot := int(wc.ID)
		if slot < 0 || slot >= len(w.RWRs) {
			continue
		}
		if wc.Status == verbs.WCWRFlushErr {
			continue
		}
		w.chain[nre] = w.RWRs[slot]
		nre++
		if wc.Status != verbs.WCSuccess {
			drops[dropWCError].Add(1)
			continue
		}
		if wc.Opcode != verbs.WCRecv || wc.Flags&verbs.WCWithImm != 0 {
			drops[dropBadOpcode].Add(1)
			continue
		}
		if wc.ByteLen < verbs.GRHLen || wc.ByteLen > recvSlot {
			drops[dropMalformed].Add(1)
			continue
		}
		off := slot * recvSlot
		// Zero-copy: the header is read where the provider put it, in
		// the receive buffer, which is re-posted only after the burst.
		req := buf[off+verbs.GRHLen : off+int(wc.ByteLen)]
		if w.off.zeroCopy {
			req = append([]byte(nil), req...)
		}
		h, _, err := spec.DecodeERPC(req)
		if err != nil {
			drops[dropMalformed].Add(1)
			continue
		}
		if h.Op != spec.ERPCOpRequest && h.Op != spec.ERPCOpPing {
			drops[dropBadOpcode].Add(1)
			continue
		}
		p := last.Lookup(peers, wc)
		if p == nil {
			drops[dropUnknownSource].Add(1)
			continue
		}
		if h.Session != p.Session {
			drops[dropWrongSession].Add(1) // a packet naming a session not its sender's
			continue
		}
		if a := wc.Arrived; a != 0 && polled.Sub(a) > spec.MaxResidence {
			drops[wk.DropExpired].Add(1)
			continue
		}
		if p.inBatch >= p.Window {
			drops[dropCredits].Add(1) // more packets than its credits in one burst
			continue
		}
		p.inBatch++
		if a := wc.Arrived; oldest == 0 || a != 0 && a < oldest {
			oldest = a
		}
		if h.Op == spec.ERPCOpPing {
			w.out[nout] = pending{p: p, op: spec.ERPCOpPong, rn: h.ReqNum}
			nout++
			continue
		}
		sl := &p.slots[h.Slot]
		switch v := sl.Receive(h.ReqNum, h.Count); v {
		case spec.ERPCRun:
			w.fresh[nfresh] = pending{p: p, op: spec.ERPCOpAnswer, slot: h.Slot, rn: h.ReqNum, k: h.Count, run: true}
			nfresh++
			values += h.Count
		case spec.ERPCResend:
			_, first, k, _ := sl.Answer()
			w.out[nout] = pending{p: p, op: spec.ERPCOpAnswer, slot: h.Slot, rn: h.ReqNum, k: k, first: first}
			nout++
		case spec.ERPCStale:
			drops[dropStale].Add(1)
		case spec.ERPCBusy:
			drops[dropBusy].Add(1)
		default:
			drops[dropMismatch].Add(1)
		}
	}
	for i := range w.fresh[:nfresh] {
		w.fresh[i].p.inBatch = 0
	}
	for i := range w.out[:nout] {
		w.out[i].p.inBatch = 0
	}
	if nre > 0 {
		if _, err := w.ReqQP.PostRecv(w.chain[:nre]); err != nil && !w.s.stopped.Load() {
			w.Log.Error("re-post receives", "err", err)
		}
	}
	if nfresh+nout == 0 {
		return
	}
	if oldest == 0 {
		oldest = polled
	}
	placed := 0
	if nfresh > 0 {
		// One claim for every request of the burst that runs (§4.7).
		var retried int
		placed, retried = layout(w.fresh[:nfresh], w.s.cfg.Format != spec.FormatCounter,
			func(n int) (uint64, bool) { return w.ClaimPolled(polled, oldest, n) })
		if placed < nfresh {
			values = 0
			for i := range w.fresh[:placed] {
				values += w.fresh[i].k
			}
			if retried >= claim.MaxRetries {
				drops[dropBoundary].Add(uint64(nfresh - placed))
			}
			for i := range w.fresh[placed:nfresh] {
				r := &w.fresh[placed+i]
				r.p.slots[r.slot].Abort()
			}
		}
		for i := range w.fresh[:placed] {
			r := &w.fresh[i]
			r.p.slots[r.slot].Done(r.first)
			w.out[nout] = *r
			nout++
		}
	}
	resends := nout - placed
	defer clear(w.fresh[:nfresh])
	defer clear(w.out[:nout])
	if nout == 0 {
		return
	}
	if !w.answer(w.out[:nout], oldest) {
		// Never posted: the values of the requests that ran were
		// skipped, and their retransmissions run them anew.
		for i := range w.out[:nout] {
			if r := &w.out[i]; r.run {
				r.p.slots[r.slot].Undo()
			}
		}
		return
	}
	w.Batches.Add(1)
	w.Requests.Add(uint64(values))
	w.requests.Add(uint64(placed))
	for i := range w.out[:nout] {
		if w.out[i].op == spec.ERPCOpPong {
			resends--
			w.pongs.Add(1)
		}
	}
	w.resends.Add(uint64(resends))
}

// newAnswerBuf is an answer buffer allocated for one answer (factors'
// prealloc off), on the heap as a buffer handed to a transport would be.
//
//go:noinline
func newAnswerBuf(n int) []byte { return make([]byte, n) }

// answer posts the answers of the burst as one chain of unsignaled
// SENDs from preallocated buffers (respq), unless the burst is by then
// older than spec.MaxResidence. It reports whether they were posted.
func (w *worker) answer(out []pending, oldest verbs.Time) bool {
	b, ok := w.Next(len(out))
	if !ok {
		return false
	}
	for i := range out {
		r := &out[i]
		wr := &w.sendWRs[i]
		wr.Opcode = verbs.OpSend
		wr.Flags = 0
		slot, sge := b.Slot(i)
		h := spec.ERPCHeader{Op: r.op, Slot: r.slot, Count: r.k, Session: r.p.Session, ReqNum: r.rn}
		if w.off.prealloc {
			m := newAnswerBuf(len(slot))
			spec.PutERPCAnswer(m, h, r.first)
			copy(slot, m)
		} else {
			spec.PutERPCAnswer(slot, h, r.first) // validated by the decoder
		}
		// An answer that does not leave is its values unsent, if it ran
		// now (in Requests); a resend's and a pong's count none.
		if r.run {
			b.Weigh(i, uint32(r.k))
		} else {
			b.Weigh(i, 0)
		}
		w.sendSGE[i] = sge
		wr.SG = w.sendSGE[i : i+1]
		r.p.Address(wr)
	}
	b.Prepare(w.sendWRs[:len(out)])
	return w.Post(b, w.sendWRs[:len(out)], oldest)
}
