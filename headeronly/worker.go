package headeronly

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/seqd/seqd/internal/claim"
	"github.com/seqd/seqd/internal/respq"
	"github.com/seqd/seqd/spec"
	"github.com/seqd/seqd/verbs"
)

// recvSlot is the size of one receive buffer: the GRH area plus room for
// an oversized payload, so that a malformed request is seen (and counted)
// rather than silently truncated.
const recvSlot = verbs.GRHLen + 24

// dropReason says why a request was not answered.
type dropReason int

const (
	dropWCError dropReason = iota
	dropBadOpcode
	dropBadLength
	dropUnknownSource
	dropExpired
	dropSendError
	dropOracle
	dropLate
	dropWindow
	numDropReasons
)

var dropReasonNames = [numDropReasons]string{
	"wc_error", "bad_opcode", "bad_length", "unknown_source", "expired", "send_error", "oracle_error",
	"late", "window",
}

func (r dropReason) String() string { return dropReasonNames[r] }

// workerStats are written by the worker only, read by Status and the
// metrics collectors at any time.
type workerStats struct {
	batches    atomic.Uint64
	requests   atomic.Uint64 // requests answered
	specMisses atomic.Uint64 // answers that carried the full value
	noGuess    atomic.Uint64 // of which the client sent NoGuess
	dupTags    atomic.Uint64 // same tag as the previous request of that QP
	stalls     atomic.Uint64 // claims refused with Behind
	guardHolds atomic.Uint64 // batches answered in full because of the guard
	drops      [numDropReasons]atomic.Uint64
	_          [64]byte
}

// peerKey identifies a client QP: its port address and QPN.
type peerKey struct {
	addr verbs.Address
	qpn  verbs.QPN
}

// peer is a client QP admitted to a worker.
type peer struct {
	key     peerKey
	ah      verbs.AH
	session uint64
	qkey    uint32        // the session's answer Q_Key
	window  int           // granted; more requests in one batch are dropped (0: not enforced)
	lastTag atomic.Uint32 // worker-owned; tag+1 of the previous request
	inBatch int           // worker-owned; requests in the current batch
}

type peerTable map[peerKey]*peer

// pending is a valid request of the current batch.
type pending struct {
	p   *peer
	imm spec.Imm
}

type worker struct {
	id   int
	core int
	s    *Server

	reqCQ, sendCQ verbs.CQ
	reqQP         verbs.QP
	recvMR        verbs.MR
	resp          *respq.Set // the Q response QPs

	free   []uint32 // receive slots not posted
	posted int
	want   atomic.Int64 // receive slots that should be posted
	filled atomic.Int64 // receive slots posted, published after each fill
	peers  atomic.Pointer[peerTable]
	budget int // sum of granted windows; guarded by Server.mu

	kick atomic.Pointer[kicker]

	wcs     []verbs.WC
	recvWRs []verbs.RecvWR
	recvSGE []verbs.SGE
	sendWRs []verbs.SendWR
	sendSGE []verbs.SGE
	pend    []pending

	guard spec.Guard
	stats workerStats

	// stall, when set (tests only), runs between a batch's claim and its
	// answers' doorbell: a worker descheduled there, or a send queue that
	// drains slowly. Loaded once per batch.
	stall atomic.Pointer[func()]
}

type kicker struct {
	ctx    context.Context
	cancel context.CancelFunc
}

func newWorker(s *Server, id int) (w *worker, err error) {
	c := &s.cfg
	w = &worker{id: id, core: c.core(id), s: s}
	defer func() {
		if err != nil {
			w.close()
		}
	}()
	dev := s.cfg.Device
	if w.reqCQ, err = dev.CreateCQ(c.MaxRecv); err != nil {
		return nil, fmt.Errorf("headeronly: worker %d: request CQ: %w", id, err)
	}
	if w.sendCQ, err = dev.CreateCQ(c.RespQPs * c.SendDepth); err != nil {
		return nil, fmt.Errorf("headeronly: worker %d: send CQ: %w", id, err)
	}
	if w.reqQP, err = s.pd.CreateQP(verbs.QPInitAttr{Type: verbs.UD, SendCQ: w.sendCQ, RecvCQ: w.reqCQ,
		Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: c.MaxRecv, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		return nil, fmt.Errorf("headeronly: worker %d: request QP: %w", id, err)
	}
	if err = verbs.BringUpUD(w.reqQP, c.QKey, 0); err != nil {
		return nil, fmt.Errorf("headeronly: worker %d: request QP bring-up: %w", id, err)
	}
	if w.recvMR, err = s.pd.RegMR(c.MaxRecv*recvSlot, verbs.AccessLocalWrite); err != nil {
		return nil, fmt.Errorf("headeronly: worker %d: receive buffers: %w", id, err)
	}
	if w.resp, err = respq.New(respq.Config{PD: s.pd, CQ: w.sendCQ, QPs: c.RespQPs, Depth: c.SendDepth,
		SignalEvery: c.SignalEvery, SlotLen: spec.FullLen, QKey: c.QKey, Batch: c.Batch}); err != nil {
		return nil, fmt.Errorf("headeronly: worker %d: %w", id, err)
	}
	w.free = make([]uint32, c.MaxRecv)
	for i := range w.free {
		w.free[i] = uint32(c.MaxRecv - 1 - i)
	}
	w.wcs = make([]verbs.WC, c.Batch)
	w.recvWRs = make([]verbs.RecvWR, max(c.Batch, c.MaxRecv))
	w.recvSGE = make([]verbs.SGE, len(w.recvWRs))
	for i := range w.recvWRs {
		w.recvWRs[i].SG = w.recvSGE[i : i+1]
	}
	w.sendWRs = make([]verbs.SendWR, c.Batch)
	w.sendSGE = make([]verbs.SGE, c.Batch)
	w.pend = make([]pending, c.Batch)
	empty := peerTable{}
	w.peers.Store(&empty)
	w.want.Store(s.recvTarget(0))
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

func (w *worker) close() {
	if w.resp != nil {
		w.resp.Close()
	}
	for _, c := range []interface{ Close() error }{w.reqQP, w.recvMR, w.reqCQ, w.sendCQ} {
		if c != nil && !isNilIface(c) {
			c.Close()
		}
	}
}

func isNilIface(c interface{ Close() error }) bool {
	switch v := c.(type) {
	case verbs.QP:
		return v == nil
	case verbs.MR:
		return v == nil
	case verbs.CQ:
		return v == nil
	}
	return false
}

// fillRecvs posts receive buffers until want are posted, as one chain.
func (w *worker) fillRecvs() error {
	want := int(w.want.Load())
	n := 0
	for w.posted+n < want && len(w.free) > 0 && n < len(w.recvWRs) {
		slot := w.free[len(w.free)-1]
		w.free = w.free[:len(w.free)-1]
		w.setRecv(n, slot)
		n++
	}
	return w.postRecvs(n)
}

func (w *worker) setRecv(i int, slot uint32) {
	w.recvWRs[i].ID = uint64(slot)
	w.recvSGE[i] = verbs.SGE{Addr: w.recvMR.Addr() + uint64(slot)*recvSlot, Length: recvSlot, LKey: w.recvMR.LKey()}
}

func (w *worker) postRecvs(n int) error {
	if n == 0 {
		return nil
	}
	done, err := w.reqQP.PostRecv(w.recvWRs[:n])
	w.posted += done
	for i := done; i < n; i++ { // refused: back to the free list
		w.free = append(w.free, uint32(w.recvWRs[i].ID))
	}
	if err != nil {
		return fmt.Errorf("headeronly: worker %d: post %d receives: %w", w.id, n, err)
	}
	return nil
}

// run is the worker's loop. It returns when the server closes.
func (w *worker) run() {
	log := w.s.log.With("worker", w.id)
	if w.core >= 0 {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := pin(w.core); err != nil {
			log.Warn("running unpinned", "err", err)
			w.core = -1
		} else {
			log.Debug("pinned", "core", w.core)
		}
	}
	start := w.s.start
	w.guard = spec.NewGuard(time.Since(start))
	idleSince := time.Duration(-1)
	for !w.s.closed.Load() {
		if err := w.fillRecvs(); err != nil {
			log.Error("receive queue", "err", err)
		}
		w.filled.Store(int64(w.posted))
		n, err := w.reqCQ.Poll(w.wcs)
		if err != nil {
			if w.s.closed.Load() {
				return
			}
			log.Error("poll requests", "err", err)
			n = 0
		}
		w.reapSends()
		now := time.Since(start)
		if n == 0 {
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
				idleSince = -1
			}
			continue
		}
		idleSince = -1
		w.batch(w.wcs[:n])
	}
}

// batch answers one polled batch of requests.
func (w *worker) batch(wcs []verbs.WC) {
	st := &w.stats
	peers := *w.peers.Load()
	valid := 0
	reposts := 0
	want := int(w.want.Load())
	oldest := verbs.Time(0) // arrival of the batch's oldest valid request
	polled := verbs.Now()
	for i := range wcs {
		wc := &wcs[i]
		slot := uint32(wc.ID)
		w.posted--
		if w.posted+reposts < want {
			w.setRecv(reposts, slot)
			reposts++
		} else {
			w.free = append(w.free, slot)
		}
		switch {
		case wc.Status != verbs.WCSuccess:
			st.drops[dropWCError].Add(1)
			continue
		case wc.Opcode != verbs.WCRecv || wc.Flags&verbs.WCWithImm == 0:
			st.drops[dropBadOpcode].Add(1)
			continue
		case spec.CheckRequestLen(int(wc.ByteLen)-verbs.GRHLen) != nil:
			st.drops[dropBadLength].Add(1)
			continue
		}
		p := peers[peerKey{wc.Src, wc.SrcQP}]
		if p == nil {
			st.drops[dropUnknownSource].Add(1)
			continue
		}
		if a := wc.Arrived; a != 0 && polled.Sub(a) > spec.MaxResidence {
			// Too old already (it waited behind a stall): dropped alone,
			// so that it does not age the fresh requests of the batch.
			st.drops[dropExpired].Add(1)
			continue
		}
		if p.inBatch++; p.inBatch > p.window && p.window > 0 {
			// More requests of this QP at the server than its window: the
			// excess is not answered (the client broke the contract that
			// sized the receive queue for everyone).
			st.drops[dropWindow].Add(1)
			continue
		}
		imm := spec.Imm(wc.Imm)
		if tag := uint32(imm.Tag()) + 1; p.lastTag.Load() == tag {
			st.dupTags.Add(1)
		} else {
			p.lastTag.Store(tag)
		}
		if a := wc.Arrived; oldest == 0 || a != 0 && a < oldest {
			oldest = a
		}
		w.pend[valid] = pending{p, imm}
		valid++
	}
	for i := range w.pend[:valid] {
		w.pend[i].p.inBatch = 0
	}
	if err := w.postRecvs(reposts); err != nil {
		w.s.log.Error("re-post receives", "worker", w.id, "err", err)
	}
	if valid == 0 {
		return
	}
	if oldest == 0 { // a provider that does not stamp: from now on
		oldest = verbs.Now()
	}
	if verbs.Now().Sub(oldest) > spec.MaxResidence {
		st.drops[dropExpired].Add(uint64(valid))
		w.clearPend(valid)
		return
	}
	first, ok := w.claim(oldest, valid)
	if !ok {
		w.clearPend(valid)
		return
	}
	confirm := w.guard.Observe(time.Since(w.s.start), first+uint64(valid)-1)
	if !confirm {
		st.guardHolds.Add(1)
	}
	if w.answer(w.pend[:valid], first, confirm, oldest) {
		st.batches.Add(1)
		st.requests.Add(uint64(valid))
	}
}

func (w *worker) clearPend(n int) {
	for i := range w.pend[:n] {
		w.pend[i] = pending{}
	}
}

// claim claims n values for a batch whose oldest request arrived at
// oldest, through claim.Batch: retrying while the oracle is behind,
// giving up once the batch is older than spec.MaxResidence.
func (w *worker) claim(oldest verbs.Time, n int) (uint64, bool) {
	first, stalls, out, err := claim.Batch(w.s.cfg.Oracle, w.s.cfg.Behind, n, func() bool {
		return verbs.Now().Sub(oldest) > spec.MaxResidence || w.s.closed.Load()
	})
	w.stats.stalls.Add(uint64(stalls))
	switch out {
	case claim.Failed:
		w.stats.drops[dropOracle].Add(uint64(n))
		w.s.log.Error("claim", "worker", w.id, "n", n, "err", err)
		return 0, false
	case claim.Expired:
		w.stats.drops[dropExpired].Add(uint64(n))
		return 0, false
	}
	return first, true
}

// answer builds one answer per request and posts them as one chain on the
// next response QP, unless the batch, whose oldest request arrived at
// oldest, is by then older than spec.MaxResidence: the age is checked
// after every wait (a full send queue, a stall) and immediately before
// the doorbell, so no answer leaves later than that after its request
// arrived (what the client's tag quarantine counts on). It reports
// whether the answers were posted.
func (w *worker) answer(reqs []pending, first uint64, confirm bool, oldest verbs.Time) bool {
	defer w.clearPend(len(reqs))
	if f := w.stall.Load(); f != nil {
		(*f)()
	}
	b, ok := w.resp.Next(len(reqs))
	if !ok {
		w.s.log.Error("send queue never drained", "worker", w.id)
		w.stats.drops[dropSendError].Add(uint64(len(reqs)))
		return false
	}
	for i := range reqs {
		v := first + uint64(i)
		tag, guess := spec.DecodeRequest(reqs[i].imm)
		wr := &w.sendWRs[i]
		wr.Opcode = verbs.OpSendWithImm
		wr.Flags = 0
		b.Prepare(wr, i)
		wr.Imm = uint32(spec.AnswerImm(tag, v))
		wr.AH = reqs[i].p.ah
		wr.RemoteQPN = reqs[i].p.key.qpn
		wr.RemoteQKey = reqs[i].p.qkey // the session's own: only its QPs accept it
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
	if verbs.Now().Sub(oldest) > spec.MaxResidence {
		// Too late: the claimed values are skipped (never handed out).
		w.stats.drops[dropLate].Add(uint64(len(reqs)))
		return false
	}
	n, err := b.Post(w.sendWRs[:len(reqs)])
	if err != nil {
		w.stats.drops[dropSendError].Add(uint64(len(reqs) - n))
		w.s.log.Error("post answers", "worker", w.id, "posted", n, "of", len(reqs), "err", err)
	}
	return n > 0
}

// reapSends frees send queue slots and counts answers that failed.
func (w *worker) reapSends() {
	if _, failed := w.resp.Reap(); failed > 0 {
		w.stats.drops[dropSendError].Add(uint64(failed))
	}
}
