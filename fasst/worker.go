package fasst

import (
	"fmt"
	"sync/atomic"

	"github.com/seqd/seqd/internal/claim"
	wk "github.com/seqd/seqd/internal/worker"
	"github.com/seqd/seqd/spec"
	"github.com/seqd/seqd/verbs"
)

// The mode's own drop reasons, after internal/worker's (expired, late,
// oracle_error, send_error).
const (
	dropWCError = wk.NumDrops + iota
	dropBadOpcode
	dropMalformed
	dropUnknownSource
	dropWindow
	dropBoundary
)

var dropNames = []string{"wc_error", "bad_opcode", "malformed", "unknown_source", "window", "boundary"}

// peer is a client QP admitted to a worker: what admission fixed
// (wk.Peer) and the fields the worker owns.
type peer struct {
	wk.Peer
	lastID  spec.FaSSTID
	seen    bool // lastID is set
	inBatch int  // requests of the current batch
}

// pending is a valid request of the current batch; first is the first
// of its k values (layout).
type pending struct {
	p     *peer
	id    spec.FaSSTID
	k     int
	first uint64
}

type worker struct {
	wk.Base
	s *Server

	wk.UDRing // the request QP, its CQs and the receive buffers
	// chain collects the batch's re-posts (UDRing.RWRs), posted as one
	// chain.
	chain []verbs.RecvWR

	peers  wk.Peers[peer] // written under Server.mu
	budget int            // sum of admitted windows; guarded by Server.mu

	wcs     []verbs.WC
	pend    []pending
	sendWRs []verbs.SendWR
	sendSGE []verbs.SGE
	// requests counts the requests answered (Base.Requests: the values
	// handed out in them); dupIDs requests repeating the previous ID of
	// their QP (network duplicates).
	requests, dupIDs atomic.Uint64
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
		return nil, fmt.Errorf("fasst: worker %d: %w", id, err)
	}
	if err = w.Init(&c.Config, id, s.PD, w.SendCQ, spec.FaSSTAnswerLen, &s.stopped, dropNames...); err != nil {
		return nil, fmt.Errorf("fasst: %w", err)
	}
	w.wcs = make([]verbs.WC, c.Batch)
	w.chain = make([]verbs.RecvWR, c.Batch)
	w.pend = make([]pending, c.Batch)
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

// batch answers one polled batch of requests: every receive buffer goes
// back in one chain, the values of every valid request are claimed at
// once, and the answers leave as one chain on the next response QP.
func (w *worker) batch(wcs []verbs.WC) {
	drops := w.Drops
	peers := w.peers.Load()
	var last wk.LastPeer[peer] // this batch's
	buf := w.RecvMR.Bytes()
	valid, values, nre := 0, 0, 0
	oldest := verbs.Time(0)
	polled := verbs.Now()
	for i := range wcs {
		wc := &wcs[i]
		slot := int(wc.ID)
		if slot < 0 || slot >= len(w.RWRs) {
			continue
		}
		if wc.Status == verbs.WCWRFlushErr {
			continue // the QP is in ERR (stopping): nothing to re-post
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
		h, err := spec.DecodeFaSSTRequest(buf[off+verbs.GRHLen : off+int(wc.ByteLen)])
		if err != nil {
			drops[dropMalformed].Add(1)
			continue
		}
		p := last.Lookup(peers, wc) // by (IP, QPN) too: a NIC sends from a source port of its choosing
		if p == nil {
			drops[dropUnknownSource].Add(1)
			continue
		}
		if a := wc.Arrived; a != 0 && polled.Sub(a) > spec.MaxResidence {
			drops[wk.DropExpired].Add(1) // dropped alone: it does not age the batch
			continue
		}
		if p.seen && p.lastID == h.ID {
			w.dupIDs.Add(1) // a network duplicate (answered, if in the window, with new values)
		}
		p.lastID, p.seen = h.ID, true
		if p.inBatch >= p.Window {
			// More requests from this QP in one batch than its window
			// (its request IDs): the excess ones are not answered.
			drops[dropWindow].Add(1)
			continue
		}
		p.inBatch++
		if a := wc.Arrived; oldest == 0 || a != 0 && a < oldest {
			oldest = a
		}
		w.pend[valid] = pending{p: p, id: h.ID, k: h.Count}
		valid++
		values += h.Count
	}
	for i := range w.pend[:valid] {
		w.pend[i].p.inBatch = 0
	}
	// The buffers' requests are decoded: back to the receive queue, one
	// chain (one doorbell) for the batch.
	if nre > 0 {
		if _, err := w.ReqQP.PostRecv(w.chain[:nre]); err != nil && !w.s.stopped.Load() {
			w.Log.Error("re-post receives", "err", err)
		}
	}
	if valid == 0 {
		return
	}
	if oldest == 0 { // a provider that does not stamp: from now on
		oldest = verbs.Now()
	}
	defer clear(w.pend[:valid])
	// One claim for the whole batch (one atomic add on the oracle), but
	// for batches of large ranges (claim.MaxClaim) and requests moved past a
	// millisecond boundary (layout).
	placed, retried := layout(w.pend[:valid], w.s.cfg.Format != spec.FormatCounter, func(n int) (uint64, bool) { return w.Claim(oldest, n) })
	if placed < valid {
		values = 0
		for i := range w.pend[:placed] {
			values += w.pend[i].k
		}
		if retried >= claim.MaxRetries {
			drops[dropBoundary].Add(uint64(valid - placed)) // else the claimer counted them
		}
	}
	if placed == 0 {
		return
	}
	if w.answer(w.pend[:placed], oldest) {
		w.Batches.Add(1)
		w.Requests.Add(uint64(values))
		w.requests.Add(uint64(placed))
	}
}

// answer posts one answer per request, request i getting the k values
// from reqs[i].first on, as one chain on the next response QP,
// unless the batch is by then older than spec.MaxResidence (Base.Post
// checks it immediately before the doorbell): then its values are
// skipped, never handed out. It reports whether the answers were posted.
func (w *worker) answer(reqs []pending, oldest verbs.Time) bool {
	b, ok := w.Next(len(reqs))
	if !ok {
		return false
	}
	for i := range reqs {
		r := &reqs[i]
		wr := &w.sendWRs[i]
		wr.Opcode = verbs.OpSend
		wr.Flags = 0
		slot, sge := b.Slot(i)
		spec.PutFaSSTAnswer(slot, r.k, r.id, r.first) // k was validated by the decoder
		b.Weigh(i, uint32(r.k))                       // an answer that does not leave is r.k values unsent
		w.sendSGE[i] = sge
		wr.SG = w.sendSGE[i : i+1]
		r.p.Address(wr)
	}
	b.Prepare(w.sendWRs[:len(reqs)])
	return w.Post(b, w.sendWRs[:len(reqs)], oldest)
}
