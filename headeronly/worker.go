package headeronly

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/seqd/seqd/internal/respq"
	wk "github.com/seqd/seqd/internal/worker"
	"github.com/seqd/seqd/spec"
	"github.com/seqd/seqd/verbs"
)

// recvSlot is the size of one receive buffer: the GRH area plus room for
// an oversized payload, so that a malformed request is seen (and counted)
// rather than silently truncated.
const recvSlot = verbs.GRHLen + 24

// The reasons a request goes unanswered besides internal/worker's
// (expired, late, oracle_error, send_error).
const (
	dropWCError = wk.NumDrops + iota
	dropBadOpcode
	dropBadLength
	dropUnknownSource
	dropWindow
)

var dropNames = []string{"wc_error", "bad_opcode", "bad_length", "unknown_source", "window"}

// workerStats are what a worker counts besides internal/worker's Counts:
// written by the worker only, read by Stats at any time.
type workerStats struct {
	specMisses atomic.Uint64 // answers that carried the full value
	noGuess    atomic.Uint64 // of which the client sent NoGuess
	dupTags    atomic.Uint64 // same tag as the previous request of that QP
	guardHolds atomic.Uint64 // batches answered in full because of the guard
	_          [64]byte
}

// peer is a client QP admitted to a worker: what admission fixed
// (wk.Peer; its Window is granted: more requests in one batch are
// dropped, 0: not enforced, only a shared queue lets more arrive) and the
// fields the worker owns.
type peer struct {
	wk.Peer
	lastTag uint32 // tag+1 of the previous request
	inBatch int    // requests in batch number gen
	gen     uint64 // the batch inBatch counts in
}

// peerTable is one published version of a worker's peers (wk.PeerMap),
// by identity on the wire.
type peerTable = wk.PeerMap[peer]

type worker struct {
	wk.Base
	s *Server

	// reqCQ takes every completion of the worker: its requests' and its
	// answers' (sendCQ is the same CQ), so that a batch is one poll and
	// one post (internal/worker.InitShared).
	reqCQ, sendCQ verbs.CQ
	reqQP         verbs.QP

	shared *recvQ               // reqQP's receives (Config.SharedRecv; else none posted)
	rqs    map[verbs.QPN]*recvQ // worker-owned: every adopted receive queue, by QPN
	// rqHot caches rqs by the QPN's low bits (worker-owned): with many
	// sessions, consecutive requests come from different queues, and the
	// map lookup was a quarter of the worker's time per request.
	rqHot  [rqHotSize]*recvQ
	inbox  rqInbox
	dying  []*recvQ          // retired queues whose receives have not all completed yet
	rqLive atomic.Int64      // session receive queues adopted and not yet destroyed
	dirty  []*recvQ          // receive queues with re-posts gathered in this batch
	chains []verbs.RecvChain // their chains, posted with the batch's answers
	want   atomic.Int64      // receives reqQP should have posted
	filled atomic.Int64      // receives posted on reqQP, published after each fill
	peers  wk.Peers[peer]
	budget int // sum of granted windows; guarded by Server.mu
	cqSize int // reqCQ's entries: 2*MaxRecv

	kick atomic.Pointer[kicker]

	wcs []verbs.WC
	// The current batch's valid requests, in order: their answers'
	// addresses are written into sendWRs as they are validated, their
	// immediates into imms (no pointers: nothing to clear afterwards).
	sendWRs []verbs.SendWR
	sendSGE []verbs.SGE
	imms    []spec.Imm
	gen     uint64 // batches taken; peer.inBatch counts within one

	guard spec.Guard
	stats workerStats
}

type kicker struct {
	ctx    context.Context
	cancel context.CancelFunc
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
	w.cqSize = 2 * c.MaxRecv
	if w.reqCQ, w.reqQP, err = c.UDSharedQueue(s.PD, w.cqSize, c.MaxRecv, c.WorkerQueue(id, 0)); err != nil {
		return nil, fmt.Errorf("headeronly: worker %d: %w", id, err)
	}
	w.sendCQ = w.reqCQ
	slots := 1 // nothing is posted on reqQP unless it is shared
	if c.SharedRecv {
		slots = c.MaxRecv
	}
	if w.shared, err = newRecvQ(s.PD, w.reqQP, 0, slots, max(c.Batch, slots)); err != nil {
		return nil, fmt.Errorf("headeronly: worker %d: %w", id, err)
	}
	w.rqs = map[verbs.QPN]*recvQ{w.shared.qpn: w.shared}
	w.dirty = make([]*recvQ, 0, c.Batch)
	w.chains = make([]verbs.RecvChain, 0, c.Batch)
	if err = w.InitShared(&c.Config, id, s.PD, w.reqCQ, spec.FullLen, &s.closed, dropNames...); err != nil {
		return nil, fmt.Errorf("headeronly: %w", err)
	}
	w.wcs = make([]verbs.WC, c.Batch)
	w.sendWRs = make([]verbs.SendWR, c.Batch)
	w.sendSGE = make([]verbs.SGE, c.Batch)
	w.imms = make([]spec.Imm, c.Batch)
	if c.SharedRecv {
		w.want.Store(s.recvTarget(0))
	}
	w.newKick()
	return w, nil
}

func (w *worker) newKick() {
	ctx, cancel := context.WithCancel(w.s.ctx)
	w.kick.Store(&kicker{ctx, cancel})
}

// wake makes a worker blocked in CQ.Wait look at its state again.
func (w *worker) wake() {
	if k := w.kick.Load(); k != nil {
		k.cancel()
	}
}

// close destroys the worker's resources, the receive queues it adopted
// and those still in its inbox. The worker is not running.
func (w *worker) Close() {
	w.Base.Close()
	w.takeInbox(false)
	for _, q := range w.rqs {
		if q != w.shared {
			q.close()
		}
	}
	w.rqs = nil
	if w.shared != nil {
		w.shared.mr.Close()
	}
	wk.CloseAll(w.reqQP, w.reqCQ)
}

// fillRecvs posts reqQP's receives until want are posted.
func (w *worker) fillRecvs() error {
	w.shared.size = int(w.want.Load())
	if err := w.shared.fill(); err != nil {
		return fmt.Errorf("headeronly: worker %d: %w", w.ID, err)
	}
	return nil
}

// takeInbox adopts the receive queues Connect handed over (their first
// receives are posted) and, unless adoptOnly, destroys those Disconnect
// retired. Retiring happens between batches only: the worker then holds
// no completion of a retired queue and has no re-post gathered for it.
func (w *worker) takeInbox(adoptOnly bool) {
	b := &w.inbox
	b.mu.Lock()
	adopt, retire := b.adopt, b.retire
	b.adopt = nil
	if !adoptOnly {
		b.retire = nil
	}
	b.pending.Store(len(b.retire) > 0)
	b.mu.Unlock()
	if adoptOnly {
		retire = nil
	}
	for _, q := range adopt {
		w.rqs[q.qpn] = q
		w.rqLive.Add(1)
	}
	for _, q := range retire {
		if w.rqs[q.qpn] != q { // never adopted (the server is closing)
			q.close()
			continue
		}
		// The error state flushes its receives into completions; it is
		// destroyed when the last of them has been polled (reapDying).
		q.dying = true
		if err := q.qp.Modify(&verbs.QPAttr{State: verbs.StateErr}, verbs.AttrState); err != nil {
			w.s.log.Warn("retire request QP", "worker", w.ID, "qpn", q.qpn, "err", err)
			q.posted = 0 // destroyed now: a completion still queued is told apart by its WR ID
		}
		w.dying = append(w.dying, q)
	}
	w.reapDying()
}

// reapDying destroys the retired queues none of whose receives is still
// outstanding. Called between batches.
func (w *worker) reapDying() {
	keep := w.dying[:0]
	for _, q := range w.dying {
		if q.posted > 0 {
			keep = append(keep, q)
			continue
		}
		delete(w.rqs, q.qpn)
		if w.rqHot[q.qpn%rqHotSize] == q {
			w.rqHot[q.qpn%rqHotSize] = nil
		}
		q.close()
		w.rqLive.Add(-1)
	}
	clear(w.dying[len(keep):])
	w.dying = keep
}

// rqOf returns the receive queue a completion came from, or nil for one
// of a queue already retired.
func (w *worker) rqOf(wc *verbs.WC) *recvQ {
	hot := &w.rqHot[wc.QPN%rqHotSize]
	if q := *hot; q != nil && q.qpn == wc.QPN && q.serial == wc.ID>>32 {
		return q
	}
	q := w.rqs[wc.QPN]
	if q == nil && w.inbox.pending.Load() {
		// Adopted after this loop looked at the inbox (Connect returned,
		// the client sent): take it now.
		w.takeInbox(true)
		q = w.rqs[wc.QPN]
	}
	if q == nil || q.serial != wc.ID>>32 {
		return nil
	}
	*hot = q
	return q
}

// rqHotSize is the number of entries of worker.rqHot.
const rqHotSize = 256

// Run is the worker's loop. It returns when the server closes.
func (w *worker) Run() {
	defer w.Pin()()
	start := w.s.start
	w.guard = spec.NewGuard(time.Duration(verbs.Now())) // on the clock of batch's polled
	idleSince := time.Duration(-1)
	empty := 0 // polls in a row that found nothing
	for !w.s.closed.Load() {
		n, err := w.poll()
		if err != nil {
			if w.s.closed.Load() {
				return
			}
			w.Log.Error("poll requests", "err", err)
		}
		if n == 0 {
			// The clock on the first and every 16th empty poll only: the
			// spin's end need not be exact, a poll a few microseconds
			// shorter is an answer sent sooner.
			if empty++; empty%16 != 1 {
				continue
			}
			now := time.Since(start)
			if idleSince < 0 {
				idleSince = now
			} else if now-idleSince > w.s.cfg.Spin {
				k := w.kick.Load()
				if err := w.reqCQ.Wait(k.ctx); err != nil && k.ctx.Err() != nil {
					if w.s.closed.Load() {
						return
					}
					w.newKick()
				}
				idleSince, empty = -1, 0
			}
			continue
		}
		idleSince, empty = -1, 0
		w.handle(w.wcs[:n])
	}
}

// poll does what the loop does between batches (adopt and retire
// receive queues, top up the shared one) and polls the CQ into w.wcs: one
// provider crossing. It returns how many completions it got.
func (w *worker) poll() (int, error) {
	if w.inbox.pending.Load() {
		w.takeInbox(false)
	}
	if len(w.dying) > 0 {
		w.reapDying()
	}
	if err := w.fillRecvs(); err != nil {
		w.Log.Error("receive queue", "err", err)
	}
	w.filled.Store(int64(w.shared.posted))
	if w.Resp.Spilled() > 0 {
		return w.Resp.TakeSpilled(w.wcs), nil // polled while waiting for send queue room
	}
	n, err := w.reqCQ.Poll(w.wcs)
	if err != nil {
		return 0, err
	}
	return n, nil
}

// handle takes the completions of one poll: the answers' go to their
// response QPs, the requests are answered as one batch.
func (w *worker) handle(wcs []verbs.WC) {
	// A poll returns the send completions posted since the last one
	// first: skipped in place, so that the requests after them are not
	// moved one by one.
	for len(wcs) > 0 && w.SendDone(&wcs[0]) {
		wcs = wcs[1:]
	}
	k := 0
	for i := range wcs {
		if w.SendDone(&wcs[i]) {
			continue
		}
		if k != i {
			wcs[k] = wcs[i]
		}
		k++
	}
	if k > 0 {
		w.batch(wcs[:k])
	}
}

// batch answers one polled batch of requests.
func (w *worker) batch(wcs []verbs.WC) {
	st := &w.stats
	tab := w.peers.Load()
	valid := 0
	var q *recvQ            // the receive queue of the previous completion
	oldest := verbs.Time(0) // arrival of the batch's oldest valid request
	polled := verbs.Now()
	w.gen++
	for i := range wcs {
		wc := &wcs[i]
		if q == nil || q.qpn != wc.QPN || q.serial != wc.ID>>32 { // else the same queue as the previous completion
			q = w.rqOf(wc)
		}
		if q == nil { // a queue retired with its session
			if wc.Status == verbs.WCSuccess {
				w.Drops[dropUnknownSource].Add(1)
			}
			continue
		}
		if q.completed(wc.ID) {
			w.dirty = append(w.dirty, q)
		}
		if q.dying { // its session is gone; flushed receives are not requests
			if wc.Status == verbs.WCSuccess {
				w.Drops[dropUnknownSource].Add(1)
			}
			continue
		}
		switch {
		case wc.Status != verbs.WCSuccess:
			w.Drops[dropWCError].Add(1)
			continue
		case wc.Opcode != verbs.WCRecv || wc.Flags&verbs.WCWithImm == 0:
			w.Drops[dropBadOpcode].Add(1)
			continue
		case spec.CheckRequestLen(int(wc.ByteLen)-verbs.GRHLen) != nil:
			w.Drops[dropBadLength].Add(1)
			continue
		}
		// q's cache first, compared field by field against the completion
		// (a Sender built on the stack and compared whole cost a
		// store-forwarding stall per request: two thirds of batch's
		// samples under load).
		p := q.lookPeer
		if k := &q.lookFrom; q.lookTab != tab || k.QPN != wc.SrcQP || k.Port != wc.Src.Port || k.GID != wc.Src.GID {
			p = lookup(tab, q, wc)
		}
		if p == nil || q.peer != nil && q.peer != p {
			// Not a connected client QP of this worker, or one that
			// sent to another client QP's request QP (of its own
			// session, whose Q_Key it holds): each request QP takes
			// the client QP assigned to it only.
			w.Drops[dropUnknownSource].Add(1)
			continue
		}
		if a := wc.Arrived; a != 0 && polled.Sub(a) > spec.MaxResidence {
			// Too old already (it waited behind a stall): dropped alone,
			// so that it does not age the fresh requests of the batch.
			w.Drops[wk.DropExpired].Add(1)
			continue
		}
		if p.gen != w.gen {
			p.gen, p.inBatch = w.gen, 0
		}
		if p.inBatch++; p.inBatch > p.Window && p.Window > 0 {
			// More requests of this QP in one batch than its window: the
			// excess is not answered (the client broke the contract that
			// sized the receive queue for everyone). Only a shared
			// receive queue lets that happen: a QP's own holds exactly
			// its window of receives, re-posted with the answers, so
			// no more of its requests are ever at the server at once.
			w.Drops[dropWindow].Add(1)
			continue
		}
		imm := spec.Imm(wc.Imm)
		if tag := uint32(imm.Tag()) + 1; p.lastTag == tag {
			st.dupTags.Add(1)
		} else {
			p.lastTag = tag
		}
		if a := wc.Arrived; oldest == 0 || a != 0 && a < oldest {
			oldest = a
		}
		wr := &w.sendWRs[valid]
		p.Address(wr)
		w.imms[valid] = imm
		valid++
	}
	for _, q := range w.dirty {
		w.chains = append(w.chains, verbs.RecvChain{QP: q.qp, WRs: q.wrs[:q.nre]})
	}
	defer w.reposted()
	if valid == 0 {
		w.PostWith(respq.Batch{}, nil, 0, w.chains)
		return
	}
	if oldest == 0 { // a provider that does not stamp: from now on
		oldest = verbs.Now()
	}
	first, ok := w.ClaimPolled(polled, oldest, valid)
	if !ok {
		w.PostWith(respq.Batch{}, nil, 0, w.chains)
		return
	}
	// The guard takes the poll's clock reading: an earlier now only holds
	// confirmations longer.
	confirm := w.guard.Observe(time.Duration(polled), first+uint64(valid)-1)
	if !confirm {
		st.guardHolds.Add(1)
	}
	if w.answer(valid, first, confirm, oldest) {
		w.Batches.Add(1)
		w.Requests.Add(uint64(valid))
	}
}

// reposted accounts for the re-posts of the batch's receive chains, which
// went out with its answers (PostWith), and forgets the chains.
func (w *worker) reposted() {
	for i, q := range w.dirty {
		if err := q.reposted(w.chains[i].Posted); err != nil {
			w.s.log.Error("re-post receives", "worker", w.ID, "err", err)
		}
		w.dirty[i] = nil
		w.chains[i] = verbs.RecvChain{}
	}
	w.dirty = w.dirty[:0]
	w.chains = w.chains[:0]
}

// lookup finds the peer a request completion of q came from in tab (nil:
// none) and puts it in q's one-entry cache, which batch checks first.
func lookup(tab *peerTable, q *recvQ, wc *verbs.WC) *peer {
	p := tab.Lookup(wc)
	q.lookTab, q.lookPeer = tab, p
	q.lookFrom, _ = verbs.SenderKeys(wc) // what batch compares a completion with
	return p
}

// answer completes the answers of the batch's n valid requests (their
// addresses are in sendWRs, their immediates in imms) and posts them as
// one chain on the next response QP, with the batch's receive re-posts
// (one provider call), unless the batch, whose oldest request arrived at
// oldest, is by then older than spec.MaxResidence: the age is checked
// after every wait (a full send queue, a stall) and immediately before
// the doorbell, so no answer leaves later than that after its request
// arrived (what the client's tag quarantine counts on). It reports
// whether the answers were posted.
func (w *worker) answer(n int, first uint64, confirm bool, oldest verbs.Time) bool {
	b, ok := w.Next(n)
	if !ok {
		w.PostWith(respq.Batch{}, nil, 0, w.chains)
		return false
	}
	wrs, imms := w.sendWRs[:n], w.imms[:n]
	b.Prepare(wrs)
	for i := range wrs {
		v := first + uint64(i)
		tag, guess := spec.DecodeRequest(imms[i])
		wr := &wrs[i]
		wr.Opcode = verbs.OpSendWithImm
		wr.Imm = uint32(spec.AnswerImm(tag, v))
		if confirm && spec.Confirms(guess, v) {
			wr.SG = nil
			continue
		}
		w.stats.specMisses.Add(1)
		if guess == spec.NoGuess {
			w.stats.noGuess.Add(1)
		}
		buf, sge := b.Slot(i)
		spec.PutFull(buf, v)
		w.sendSGE[i] = sge
		wr.SG = w.sendSGE[i : i+1]
	}
	return w.PostWith(b, wrs, oldest, w.chains)
}
