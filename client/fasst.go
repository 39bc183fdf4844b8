package client

import (
	"context"
	"fmt"
	"time"

	"github.com/seqd/seqd/admin/handshake"
	"github.com/seqd/seqd/spec"
	"github.com/seqd/seqd/verbs"
)

func init() { transports[spec.ModeFaSST] = dialFaSST }

// fasstTransport is the client side of the FaSST mode (PROTOCOL.md,
// "FaSST"): UD QPs that SEND requests carrying an RPC header (request ID
// and count k) to the server's request QPs and RECV the answers.
//
// Coalescing: one Send call puts the callers it is handed into as few
// requests as it can, one per client QP with room (usually one), each
// for k values; the answer's k consecutive values go to the callers in
// order. Every QP keeps at most window values in flight (the server
// answers no more per QP and batch), in at most window requests (its
// request-ID slots, spec.FaSSTSlots).
// With coalescing off (WithCoalescing(0): single) every caller is a
// request of its own, as many per QP as its window has room for.
//
// Loss: a request unanswered after the retransmission timeout is sent
// again under a fresh ID, for the callers still waiting in it; an answer
// to any ID but the current one of a busy slot is stale and dropped.
//
// Ranges (GetRange): a caller's range of k values is a request of its
// own, for k values (up to spec.FaSSTMaxRange, beyond the window, which
// bounds the values of coalesced callers), whose answer's first value is
// the caller's. Every QP keeps at most window requests in flight, ranges
// and coalesced ones together, as the server answers no more per QP and
// batch.
//
// Engine IDs are 0 ≤ id < qps × window.
type fasstTransport struct {
	dev     verbs.Device
	pd      verbs.PD
	sendCQ  verbs.CQ
	reqMR   verbs.MR // one request buffer per (QP, slot)
	qps     []*fasstQP
	window  int
	timeout time.Duration
	st      *stats
	answerRecvs

	// answerCarry: where each engine ID waits (where, outstanding) and
	// the accepted answers whose values did not fit in Poll's result
	// slice, delivered first by the next Poll (an accepted answer's
	// callers move into the carry, its slot is free again at once).
	answerCarry
	rr int // the QP the next Send starts with
	// single: one caller per request (WithCoalescing(0)).
	single bool

	swcs []verbs.WC
}

type fasstQP struct {
	qp     verbs.QP
	ah     verbs.AH
	dest   verbs.QPN // the server request QP
	qkey   uint32    // the request Q_Key
	slots  *spec.FaSSTSlots
	calls  [][]int // per slot: the engine IDs of its request, in value order (-1: cancelled)
	live   []int   // per slot: IDs not cancelled
	due    []timer // per slot: its request's timeout
	span   []int   // per slot: k of a range request, 0 for coalesced callers
	values int     // values asked by the coalesced requests in flight
	sendChain
}

const (
	fasstSignalEvery = 16
	fasstRecvSlot    = verbs.GRHLen + 2*spec.FaSSTAnswerLen
)

var (
	_ transport      = (*fasstTransport)(nil)
	_ rangeTransport = (*fasstTransport)(nil)
)

// dialFaSST builds the QPs, asks the server to admit them in mode fasst
// and attaches them to the grant.
func dialFaSST(ctx context.Context, env *transportEnv) (transport, error) {
	window := min(max(env.window, 1), spec.FaSSTMaxCount)
	t, err := newFaSST(env.pd, env.dev, env.qps, window, env.retransmit, env.st)
	if err != nil {
		return nil, fmt.Errorf("client: fasst QPs: %w", err)
	}
	qps := endpointsOf(t.qps, func(q *fasstQP) verbs.QP { return q.qp })
	t.single = env.single
	return admit(ctx, env, handshake.Admission{Window: window, QPs: qps}, spec.ModeFaSST, t)
}

func newFaSST(pd verbs.PD, dev verbs.Device, nqps, window int, timeout time.Duration, st *stats) (t *fasstTransport, err error) {
	if nqps < 1 || window < 1 || window > spec.FaSSTMaxCount {
		return nil, fmt.Errorf("%d QPs, window %d", nqps, window)
	}
	t = &fasstTransport{dev: dev, pd: pd, window: window, timeout: timeout, st: st}
	defer func() {
		if err != nil {
			t.Close()
		}
	}()
	depth := 2*window + 2*fasstSignalEvery
	if err = t.openRecvs(dev, pd, nqps, 2*window+16, fasstRecvSlot); err != nil {
		return nil, err
	}
	if t.sendCQ, err = dev.CreateCQ(nqps * depth); err != nil {
		return nil, fmt.Errorf("send CQ: %w", err)
	}
	if t.reqMR, err = pd.RegMR(nqps*window*spec.FaSSTRequestLen, verbs.AccessLocalWrite); err != nil {
		return nil, fmt.Errorf("request buffers: %w", err)
	}
	for i := range nqps {
		q := &fasstQP{calls: make([][]int, window), live: make([]int, window), due: make([]timer, window),
			span: make([]int, window), sendChain: newSendChain(window)}
		for s := range q.calls {
			q.calls[s] = make([]int, 0, window)
		}
		if q.slots, err = spec.NewFaSSTSlots(window); err != nil {
			return nil, err
		}
		t.qps = append(t.qps, q)
		if q.qp, err = pd.CreateQP(verbs.QPInitAttr{Type: verbs.UD, SendCQ: t.sendCQ, RecvCQ: t.recvCQ,
			Cap: verbs.QPCap{MaxSendWR: depth, MaxRecvWR: t.recvN, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: spec.FaSSTRequestLen}}); err != nil {
			return nil, fmt.Errorf("QP %d: %w", i, err)
		}
	}
	t.where = make([]callRef, nqps*window)
	for i := range t.where {
		t.where[i].qi = refFree
	}
	t.carry = make([]carried, 0, len(t.wcs))
	for range len(t.wcs) {
		t.spare = append(t.spare, make([]int, 0, window))
	}
	t.swcs = make([]verbs.WC, 64)
	return t, nil
}

// attach reads the grant: window, request QPs and Q_Key, the answer
// Q_Key and the QPs answers come from. It brings the QPs up with the
// answer Q_Key and posts their RECVs before any request leaves.
func (t *fasstTransport) attach(g handshake.Grant) error {
	t.answerFrom = sendersOf(g.AnswerQPs)
	t.window = min(t.window, g.Window)
	for i, q := range t.qps {
		srv := g.ServerQPs[g.Assignment[i]]
		var err error
		if q.ah, err = t.pd.CreateAH(verbs.AHAttr{Dest: srv.Addr, PortNum: 1}); err != nil {
			return fmt.Errorf("client: fasst: address handle for %v: %w", srv.Addr, err)
		}
		q.dest, q.qkey = srv.QPN, g.QKey
		if err := verbs.BringUpUD(q.qp, g.AnswerQKey, 0); err != nil {
			return fmt.Errorf("client: fasst QP %d bring-up: %w", i, err)
		}
		if err := t.fillRecvs(i, q.qp); err != nil {
			return fmt.Errorf("client: fasst QP %d: post receives: %w", i, err)
		}
	}
	return nil
}

// Free is how many more callers Send takes now: the values each QP may
// still ask for.
func (t *fasstTransport) Free() int {
	n := 0
	for _, q := range t.qps {
		if t.room(q) {
			n += max(t.window-q.values, 0)
		}
	}
	return n
}

// room reports whether q may send one more request: a free slot, and
// fewer than window requests in flight (the grant's window may be below
// the slots made at dial).
func (t *fasstTransport) room(q *fasstQP) bool {
	return q.slots.Free() > 0 && q.slots.Len()-q.slots.Free() < t.window
}

// Outstanding is how many callers wait for a value.
func (t *fasstTransport) Outstanding() int { return t.outstanding }

// CQ is the queue answers arrive on.
func (t *fasstTransport) CQ() verbs.CQ { return t.recvCQ }

// Broken is never true: UD has no connection to break.
func (t *fasstTransport) Broken() bool { return false }

// Send coalesces ids into one request per QP with room, starting with
// the QP after the one the previous Send started with; all of them are
// rung with one doorbell where the device can.
func (t *fasstTransport) Send(now time.Duration, ids []int) (int, error) {
	for i, id := range ids {
		if id < 0 || id >= len(t.where) || t.where[id].qi != refFree {
			ids = ids[:i] // not an ID this transport can take: take the prefix before it
			break
		}
	}
	if len(ids) == 0 {
		return 0, nil
	}
	if b, ok := t.dev.(verbs.DoorbellBatcher); ok {
		b.HoldDoorbell()
		defer b.RingDoorbell()
	}
	took := 0
	var ferr error
	for k := 0; k < len(t.qps) && took < len(ids); k++ {
		qi := (t.rr + k) % len(t.qps)
		q := t.qps[qi]
		sent := false
		for took < len(ids) {
			m := min(t.window-q.values, len(ids)-took)
			if t.single {
				m = min(m, 1) // one caller per request, as many requests as the QP has room for
			}
			if m <= 0 || !t.room(q) {
				break
			}
			slot, rid, ok := q.slots.Take(m)
			if !ok {
				break
			}
			q.due[slot].busy, q.live[slot] = true, m
			q.calls[slot] = append(q.calls[slot][:0], ids[took:took+m]...)
			for i, id := range q.calls[slot] {
				t.where[id] = callRef{qi, slot, i}
			}
			q.values += m
			t.outstanding += m
			t.queue(now, qi, slot, rid, m)
			took += m
			sent = true
			if !t.single {
				break // the callers coalesced into one request per QP
			}
		}
		if !sent {
			continue
		}
		if err := t.flush(q); err != nil && ferr == nil {
			ferr = err
		}
	}
	t.rr = (t.rr + 1) % len(t.qps)
	return took, ferr
}

// SendRange sends engine request id as a request of its own for k
// consecutive values, on the first QP from the round-robin one with
// room; it reports false when none has.
func (t *fasstTransport) SendRange(now time.Duration, id, k int) (bool, error) {
	if id < 0 || id >= len(t.where) || t.where[id].qi != refFree || k < 1 || k > spec.FaSSTMaxRange {
		return false, nil
	}
	qi := -1
	for i := range t.qps {
		if q := t.qps[(t.rr+i)%len(t.qps)]; t.room(q) {
			qi = (t.rr + i) % len(t.qps)
			break
		}
	}
	if qi < 0 {
		return false, nil
	}
	q := t.qps[qi]
	slot, rid, _ := q.slots.Take(k) // room: a slot is free
	if b, ok := t.dev.(verbs.DoorbellBatcher); ok {
		b.HoldDoorbell()
		defer b.RingDoorbell()
	}
	q.due[slot].busy, q.live[slot], q.span[slot] = true, 1, k
	q.calls[slot] = append(q.calls[slot][:0], id)
	t.where[id] = callRef{qi, slot, 0}
	t.outstanding++
	t.queue(now, qi, slot, rid, k)
	t.rr = (qi + 1) % len(t.qps)
	return true, t.flush(q)
}

// release frees slot s of q: answered, or none of its callers waits.
func (t *fasstTransport) release(q *fasstQP, s int) {
	if q.span[s] == 0 {
		q.values -= q.slots.Count(s)
	}
	q.slots.Release(s)
	q.due[s].busy, q.live[s], q.span[s] = false, 0, 0
}

// queue adds the request of slot (ID rid, k values) to its QP's chain,
// and arms its timeout.
func (t *fasstTransport) queue(now time.Duration, qi, slot int, rid spec.FaSSTID, k int) {
	q := t.qps[qi]
	q.due[slot].deadline = now + t.timeout
	idx := qi*cap(q.due) + slot
	off := idx * spec.FaSSTRequestLen
	spec.PutFaSSTRequest(t.reqMR.Bytes()[off:off+spec.FaSSTRequestLen], k, rid) // 1 ≤ k ≤ FaSSTMaxRange
	q.add(qi, fasstSignalEvery, verbs.SendWR{Opcode: verbs.OpSend, Flags: verbs.Inline, AH: q.ah, RemoteQPN: q.dest, RemoteQKey: q.qkey},
		verbs.SGE{Addr: t.reqMR.Addr() + uint64(off), Length: spec.FaSSTRequestLen, LKey: t.reqMR.LKey()})
}

// flush posts q's queued requests as one chain (one doorbell). Requests
// that could not be posted are sent again when they time out.
func (t *fasstTransport) flush(q *fasstQP) error {
	if err := q.post(q.qp, uint64(2*cap(q.due)+fasstSignalEvery), t.reapSends, t.st); err != nil {
		return fmt.Errorf("client: fasst: %w", err)
	}
	return nil
}

// Poll hands out the values of accepted answers, each caller of a
// request its own (first+i), and re-posts the RECVs it consumed, one
// chain per QP.
func (t *fasstTransport) Poll(now time.Duration, res []result) int {
	t.reapSends()
	k := t.drainCarry(res)
	if k == len(res) || len(t.carry) > 0 {
		return k
	}
	n, err := t.recvCQ.Poll(t.wcs)
	if err != nil || n == 0 {
		return k
	}
	for qi, q := range t.qps {
		t.answersOf(qi, n, q.qp, t.st, func(payload []byte, _ verbs.Time) {
			h, first, err := spec.DecodeFaSSTAnswer(payload)
			if err != nil {
				t.st.malformed.Add(1)
				return
			}
			s, ok := q.slots.Match(h.ID, h.Count)
			if !ok {
				t.st.stale.Add(1) // an answer to an earlier ID, a released slot, or a duplicate
				return
			}
			// Matched: the callers move to the carry, and the slot is
			// released, so that no later answer to this ID matches.
			q.calls[s] = t.accept(q.calls[s], first, false)
			t.release(q, s)
		})
	}
	return k + t.drainCarry(res[k:])
}

// Expire sends every request whose timeout passed again, under a fresh
// ID, for the callers still waiting in it, and returns how many it
// resent.
func (t *fasstTransport) Expire(now time.Duration) int {
	if d, ok := t.NextDeadline(); !ok || now < d {
		return 0
	}
	if b, ok := t.dev.(verbs.DoorbellBatcher); ok {
		b.HoldDoorbell()
		defer b.RingDoorbell()
	}
	return expire(t.qps, now, func(qi, s int) { t.resend(now, qi, s) }, t.flush)
}

// resend sends slot s of QP qi, whose request timed out, again.
func (t *fasstTransport) resend(now time.Duration, qi, s int) {
	q := t.qps[qi]
	// Compact: cancelled callers leave the request.
	calls := q.calls[s][:0]
	for _, id := range q.calls[s] {
		if id >= 0 {
			t.where[id].idx = len(calls)
			calls = append(calls, id)
		}
	}
	q.calls[s] = calls
	k := q.span[s] // a range asks for its k values again
	if k == 0 {
		k = len(calls)
		q.values += k - q.slots.Count(s)
	}
	t.queue(now, qi, s, q.slots.Renew(s, k), k)
}

// NextDeadline is when the earliest request in flight times out.
func (t *fasstTransport) NextDeadline() (time.Duration, bool) { return nextDeadline(t.qps) }

func (q *fasstQP) timers() []timer { return q.due }

// Cancel drops id: its value, if its request is answered, is skipped. A
// request none of whose callers waits any more is released, and an
// answer to it is stale.
func (t *fasstTransport) Cancel(id int) {
	if id < 0 || id >= len(t.where) || t.where[id].qi == refFree {
		return
	}
	r := t.where[id]
	t.where[id].qi = refFree
	t.outstanding--
	if r.qi == refCarried {
		// Answered, its value not yet reported: skip it.
		for i := range t.carry {
			for j, c := range t.carry[i].calls {
				if c == id {
					t.carry[i].calls[j] = -1
				}
			}
		}
		return
	}
	q := t.qps[r.qi]
	q.calls[r.slot][r.idx] = -1
	if q.live[r.slot]--; q.live[r.slot] == 0 && q.due[r.slot].busy {
		t.release(q, r.slot)
		q.calls[r.slot] = q.calls[r.slot][:0]
	}
}

func (t *fasstTransport) reapSends() int { return reapSends(t.sendCQ, t.swcs, t.qps) }

// Close releases the transport's verbs resources (not the PD).
func (t *fasstTransport) Close() error {
	for _, q := range t.qps {
		closeAll(q.qp, q.ah)
	}
	t.qps = nil
	closeAll(t.reqMR, t.recvMR, t.recvCQ, t.sendCQ)
	return nil
}
