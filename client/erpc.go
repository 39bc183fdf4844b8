package client

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/seqd/seqd/admin/handshake"
	"github.com/seqd/seqd/spec"
	"github.com/seqd/seqd/verbs"
)

func init() { transports[spec.ModeERPC] = dialERPC }

// erpcTransport is the client side of the eRPC mode (PROTOCOL.md,
// "eRPC"): each UD QP is a session endpoint of spec.ERPCSlots slots and
// C credits (the grant's window), its protocol state a pure
// spec.ERPCClientSession. A request asks for k values under its slot's
// next request number: the callers one Send call hands it, coalesced
// (up to erpcMaxCoalesce, each getting first+i, as fasst's), or one
// caller's range (GetRange, the caller getting first).
//
// Loss: when the oldest request of a session is unanswered for the RTO
// (spec.ERPCDefaultRTO unless WithRetransmit sets another than the
// client default), every request in flight on it is sent again in the
// order first sent (go-back-N), under the same request numbers: the
// server answers a retransmission from its slot, with the same values.
// An answer to any other request number is stale and dropped.
//
// Failure: a session quiet for spec.ERPCHeartbeat is pinged (while the
// engine runs); one that waits for the server and hears nothing from it
// for spec.ERPCFailAfter breaks the transport: the engine reconnects and
// sends the calls in flight again on the next connection.
//
// Congestion control (thesis §6.4.2; on with WithCongestionControl
// (true)): each session runs spec.Timely on the RTT of its answers
// (none of a retransmitted request's: Karn), and a congested session's
// requests leave paced at its rate by a Carousel wheel (spec.Wheel)
// shared by the sessions. Both common cases are bypassed: an answer
// below its T_low (spec.TimelyTLow scaled by the session's base RTT,
// spec.Timely.Scale) on an uncongested session runs no update, and
// an uncongested session (at line rate) sends at once, past the wheel.
// The clock is read once per batch: the engine's now, never per packet.
// Go-back-N retransmissions and pings are not paced.
//
// Engine IDs are 0 ≤ id < qps × spec.ERPCSlots × erpcMaxCoalesce.
type erpcTransport struct {
	dev     verbs.Device
	pd      verbs.PD
	sendCQ  verbs.CQ
	reqMR   verbs.MR // per QP: one request buffer per slot, then the ping's
	qps     []*erpcQP
	credits int
	single  bool // WithCoalescing(0): one caller per request
	rto     time.Duration
	session uint64
	st      *stats
	answerRecvs

	answerCarry // where each engine ID waits; accepted answers' values not handed out yet
	rr          int
	broken      bool
	// reanswered counts copies of an answer carrying another value than
	// the first copy: the server broke at-most-once.
	reanswered uint64

	swcs   []verbs.WC
	resend []int

	// cc: congestion control on; wheel paces congested sessions, its
	// items qi×spec.ERPCSlots+slot; due takes a drain.
	cc    bool
	wheel *spec.Wheel
	due   []uint32

	// arrived bounds when an answer reached the host: its RTT's end.
	arrived arrivals
	// link is the line rate Timely is given (bytes/s; 0: its default).
	link float64

	// off turns optimizations off, one at a time, for the factor
	// analysis (BenchmarkERPCFactors, thesis Table 6.2); none in use.
	off erpcFactors
}

// erpcFactors are the erpc client's optimizations as a benchmark turns
// them off: each true field is one off.
type erpcFactors struct {
	// batchedClock off: the clock is read for each request sent and
	// each answer taken, not once per engine step.
	batchedClock bool
	// timelyBypass off: every RTT sample runs Timely's update.
	timelyBypass bool
	// wheelBypass off: with congestion control on, every request goes
	// through the wheel, an uncongested session's too.
	wheelBypass bool
	clock       func() time.Duration // the clock batchedClock reads
}

type erpcQP struct {
	qp    verbs.QP
	ah    verbs.AH
	dest  verbs.QPN
	qkey  uint32
	sess  *spec.ERPCClientSession
	calls [spec.ERPCSlots][]int // per busy slot: its callers' engine IDs in value order (-1: cancelled)
	live  [spec.ERPCSlots]int   // callers not cancelled
	rng   [spec.ERPCSlots]bool  // a range request
	sendChain

	// Congestion control: the session's Timely; when its next request
	// may leave; per slot, when its request left (the RTT's start),
	// whether it was sent again (its RTT is no sample), and the request
	// number waiting in the wheel (0: none).
	tl      spec.Timely
	nextTx  time.Duration
	sentAt  [spec.ERPCSlots]time.Duration
	resent  [spec.ERPCSlots]bool
	wheeled [spec.ERPCSlots]uint64
}

const (
	erpcSignalEvery = 16
	erpcRecvSlot    = verbs.GRHLen + 2*spec.ERPCAnswerLen
	erpcBufs        = spec.ERPCSlots + 1 // request buffers per QP: one per slot and the ping's
	// erpcMaxCoalesce is the most callers one request carries.
	erpcMaxCoalesce = 64
	// erpcWireBytes is a request's size on the wire, as the rate
	// limiter counts it: Ethernet, IPv4, UDP, BTH, DETH, payload, ICRC.
	erpcWireBytes = 14 + 20 + 8 + 12 + 8 + spec.ERPCRequestLen + 4
	// The wheel: 4096 slots of at least 1 µs, wide enough that the
	// horizon holds a session's every request at Timely's floor
	// (setLink): 1 µs (a 4 ms horizon) at the default link, where a
	// request at the floor leaves every ~50 µs.
	erpcWheelSlot  = time.Microsecond
	erpcWheelSlots = 4096
)

var (
	_ transport      = (*erpcTransport)(nil)
	_ rangeTransport = (*erpcTransport)(nil)
)

// dialERPC builds the QPs, asks the server to admit them in mode erpc
// with the client's window as credits, and attaches them to the grant.
func dialERPC(ctx context.Context, env *transportEnv) (transport, error) {
	credits := env.window
	if credits <= 0 {
		credits = spec.ERPCDefaultCredits
	}
	credits = min(credits, spec.ERPCMaxCredits)
	rto := spec.ERPCDefaultRTO
	if env.retransmit > 0 && env.retransmit != spec.DefaultTimeout {
		rto = env.retransmit
	}
	t, err := newERPC(env.pd, env.dev, env.qps, credits, rto, env.st)
	if err != nil {
		return nil, fmt.Errorf("client: erpc QPs: %w", err)
	}
	t.single = env.single
	t.cc = env.cc
	t.arrived = newArrivals(env)
	if env.linkRate > 0 {
		t.setLink(env.linkRate / 8)
	}
	qps := endpointsOf(t.qps, func(q *erpcQP) verbs.QP { return q.qp })
	return admit(ctx, env, handshake.Admission{Window: credits, QPs: qps}, spec.ModeERPC, t)
}

func newERPC(pd verbs.PD, dev verbs.Device, nqps, credits int, rto time.Duration, st *stats) (t *erpcTransport, err error) {
	if nqps < 1 || nqps > 255 || credits < 1 {
		return nil, fmt.Errorf("%d QPs, %d credits", nqps, credits)
	}
	t = &erpcTransport{dev: dev, pd: pd, credits: credits, rto: rto, st: st}
	defer func() {
		if err != nil {
			t.Close()
		}
	}()
	depth := 2*erpcBufs + 2*erpcSignalEvery
	if err = t.openRecvs(dev, pd, nqps, 2*spec.ERPCSlots+16, erpcRecvSlot); err != nil {
		return nil, err
	}
	if t.sendCQ, err = dev.CreateCQ(nqps * depth); err != nil {
		return nil, fmt.Errorf("send CQ: %w", err)
	}
	if t.reqMR, err = pd.RegMR(nqps*erpcBufs*spec.ERPCRequestLen, verbs.AccessLocalWrite); err != nil {
		return nil, fmt.Errorf("request buffers: %w", err)
	}
	for i := range nqps {
		q := &erpcQP{sendChain: newSendChain(2 * erpcBufs)}
		for s := range q.calls {
			q.calls[s] = make([]int, 0, erpcMaxCoalesce)
		}
		t.qps = append(t.qps, q)
		if q.qp, err = pd.CreateQP(verbs.QPInitAttr{Type: verbs.UD, SendCQ: t.sendCQ, RecvCQ: t.recvCQ,
			Cap: verbs.QPCap{MaxSendWR: depth, MaxRecvWR: t.recvN, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: spec.ERPCRequestLen}}); err != nil {
			return nil, fmt.Errorf("QP %d: %w", i, err)
		}
	}
	t.where = make([]callRef, nqps*spec.ERPCSlots*erpcMaxCoalesce)
	for i := range t.where {
		t.where[i].qi = refFree
	}
	t.carry = make([]carried, 0, nqps*spec.ERPCSlots)
	for range nqps * spec.ERPCSlots {
		t.spare = append(t.spare, make([]int, 0, erpcMaxCoalesce))
	}
	t.swcs = make([]verbs.WC, 64)
	t.resend = make([]int, 0, spec.ERPCSlots)
	t.due = make([]uint32, 0, 2*nqps*spec.ERPCSlots)
	t.setLink(0)
	return t, nil
}

// setLink sets the line rate (bytes/s; ≤ 0: spec.TimelyLinkRate) the
// sessions' Timely starts at and scales by, and sizes the wheel's slots
// so that its horizon holds all of a session's requests at Timely's
// floor. Before attach.
func (t *erpcTransport) setLink(link float64) {
	t.link = link
	tl := spec.NewTimely(link)
	width := time.Duration(math.Ceil(float64(spec.ERPCSlots*erpcWireBytes) / tl.Floor() * float64(time.Second) / (erpcWheelSlots - 1)))
	// A slot's request cancelled while it waits in the wheel leaves a
	// stale item: twice the slots is room for both.
	t.wheel = spec.NewWheel(max(erpcWheelSlot, width), erpcWheelSlots, 2*len(t.qps)*spec.ERPCSlots)
}

// attach reads the grant: the session, its credits, the request QPs and
// Q_Key, the answer Q_Key and the QPs answers come from; it brings the
// QPs up and posts their RECVs before any request leaves.
func (t *erpcTransport) attach(g handshake.Grant) error {
	t.answerFrom = sendersOf(g.AnswerQPs)
	t.session = g.Session
	if g.Window > 0 {
		t.credits = min(t.credits, g.Window)
	}
	for i, q := range t.qps {
		srv := g.ServerQPs[g.Assignment[i]]
		var err error
		if q.ah, err = t.pd.CreateAH(verbs.AHAttr{Dest: srv.Addr, PortNum: 1}); err != nil {
			return fmt.Errorf("client: erpc: address handle for %v: %w", srv.Addr, err)
		}
		q.dest, q.qkey = srv.QPN, g.QKey
		q.sess = spec.NewERPCClientSession(t.credits, t.rto, 0, 0, 0)
		q.tl = spec.NewTimely(t.link)
		q.sess.Rate = q.tl.Rate
		if err := verbs.BringUpUD(q.qp, g.AnswerQKey, 0); err != nil {
			return fmt.Errorf("client: erpc QP %d bring-up: %w", i, err)
		}
		if err := t.fillRecvs(i, q.qp); err != nil {
			return fmt.Errorf("client: erpc QP %d: post receives: %w", i, err)
		}
	}
	return nil
}

// Free is how many more callers the sessions take now.
func (t *erpcTransport) Free() int {
	n := 0
	for _, q := range t.qps {
		if q.sess != nil {
			n += q.sess.Room() * erpcMaxCoalesce
		}
	}
	return n
}

// Outstanding is how many requests are in flight.
func (t *erpcTransport) Outstanding() int { return t.outstanding }

// CQ is the queue answers arrive on.
func (t *erpcTransport) CQ() verbs.CQ { return t.recvCQ }

// Broken reports that a session found the server dead.
func (t *erpcTransport) Broken() bool { return t.broken }

// Reanswered is how many answers repeated a request number with another
// value (0 unless the server broke at-most-once).
func (t *erpcTransport) Reanswered() uint64 { return t.reanswered }

// pick is the first QP from the round-robin one with room, -1 for none.
func (t *erpcTransport) pick() int {
	for i := range t.qps {
		qi := (t.rr + i) % len(t.qps)
		if q := t.qps[qi]; q.sess != nil && q.sess.Room() > 0 {
			return qi
		}
	}
	return -1
}

// Send coalesces ids into requests of up to erpcMaxCoalesce callers,
// each on the next session with room, round-robin; every QP touched is
// rung once.
func (t *erpcTransport) Send(now time.Duration, ids []int) (int, error) {
	if t.broken {
		return 0, nil
	}
	for i, id := range ids {
		if id < 0 || id >= len(t.where) || t.where[id].qi != refFree {
			ids = ids[:i] // take the prefix before an ID this transport cannot take
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
	t.pace(now)
	took := 0
	for took < len(ids) {
		qi := t.pick()
		if qi < 0 {
			break
		}
		m := min(len(ids)-took, erpcMaxCoalesce)
		if t.single {
			m = 1 // coalescing off: every caller a request of its own
		}
		t.start(now, qi, ids[took:took+m], m, false)
		t.rr = (qi + 1) % len(t.qps)
		took += m
	}
	return took, t.flushAll()
}

// SendRange sends id as one request for k values.
func (t *erpcTransport) SendRange(now time.Duration, id, k int) (bool, error) {
	if t.broken || id < 0 || id >= len(t.where) || t.where[id].qi != refFree || k < 1 || k > spec.ERPCMaxRange {
		return false, nil
	}
	qi := t.pick()
	if qi < 0 {
		return false, nil
	}
	if b, ok := t.dev.(verbs.DoorbellBatcher); ok {
		b.HoldDoorbell()
		defer b.RingDoorbell()
	}
	t.pace(now)
	t.start(now, qi, []int{id}, k, true)
	t.rr = (qi + 1) % len(t.qps)
	return true, t.flushAll()
}

// start takes a slot of session qi for the callers ids, k values: a
// range (one caller) or one value each (k = len(ids)).
func (t *erpcTransport) start(now time.Duration, qi int, ids []int, k int, rng bool) {
	q := t.qps[qi]
	slot, rn, _ := q.sess.Take(now, k) // room: checked by pick
	q.calls[slot] = append(q.calls[slot][:0], ids...)
	q.live[slot], q.rng[slot] = len(ids), rng
	for i, id := range ids {
		t.where[id] = callRef{qi, slot, i}
	}
	t.outstanding += len(ids)
	q.resent[slot], q.wheeled[slot] = false, 0
	if t.off.batchedClock {
		now = t.off.clock()
	}
	if t.cc && (!q.tl.Uncongested() || t.off.wheelBypass) {
		// A congested session: the request leaves at the session's
		// rate, through the wheel when that is later than now.
		at := max(now, q.nextTx)
		q.nextTx = at + q.tl.Gap(erpcWireBytes)
		if (at > now || t.off.wheelBypass) && t.wheel.Insert(now, at, uint32(qi*spec.ERPCSlots+slot)) {
			// Not on the wire until the wheel lets it go: no timer
			// runs for it meanwhile (spec's Hold, Sent).
			q.wheeled[slot] = rn
			q.sess.Hold(slot)
			return
		}
	}
	q.sentAt[slot] = now
	t.queue(qi, slot, spec.ERPCHeader{Op: spec.ERPCOpRequest, Slot: slot, Count: k, Session: t.session, ReqNum: rn})
}

// pace queues the requests the wheel has due by now: those still in
// flight under the request number they were scheduled with (a cancelled
// or already retransmitted one is skipped). The caller flushes.
func (t *erpcTransport) pace(now time.Duration) {
	if t.wheel.Len() == 0 {
		return
	}
	t.due = t.wheel.Drain(now, t.due[:0])
	for _, it := range t.due {
		qi, slot := int(it)/spec.ERPCSlots, int(it)%spec.ERPCSlots
		q := t.qps[qi]
		rn, k, ok := q.sess.Request(slot)
		if !ok || q.wheeled[slot] == 0 || rn != q.wheeled[slot] {
			continue
		}
		q.wheeled[slot], q.sentAt[slot] = 0, now
		q.sess.Sent(slot, now)
		t.queue(qi, slot, spec.ERPCHeader{Op: spec.ERPCOpRequest, Slot: slot, Count: k, Session: t.session, ReqNum: rn})
	}
}

// congestion sums the sessions' Timely counters (spec.Timely's
// Updates, Bypassed, Above, Lowered and Rates); MinRate is the lowest.
func (t *erpcTransport) congestion() (sum spec.Timely) {
	sum.MinRate = spec.TimelyLinkRate
	for _, q := range t.qps {
		tl := &q.tl
		sum.MinRate = min(sum.MinRate, tl.MinRate)
		sum.Updates += tl.Updates
		sum.Bypassed += tl.Bypassed
		sum.Above += tl.Above
		sum.Lowered += tl.Lowered
		for k, n := range tl.Rates {
			sum.Rates[k] += n
		}
	}
	return sum
}

// queue adds a request (or ping, buffer erpcBufs-1) to its QP's chain.
func (t *erpcTransport) queue(qi, buf int, h spec.ERPCHeader) {
	q := t.qps[qi]
	if h.Op == spec.ERPCOpPing {
		buf = erpcBufs - 1
	}
	off := (qi*erpcBufs + buf) * spec.ERPCRequestLen
	spec.PutERPCHeader(t.reqMR.Bytes()[off:off+spec.ERPCRequestLen], h) // valid by construction
	q.add(qi, erpcSignalEvery, verbs.SendWR{Opcode: verbs.OpSend, Flags: verbs.Inline, AH: q.ah, RemoteQPN: q.dest, RemoteQKey: q.qkey},
		verbs.SGE{Addr: t.reqMR.Addr() + uint64(off), Length: spec.ERPCRequestLen, LKey: t.reqMR.LKey()})
}

// flushAll posts every QP's queued requests, one chain each. Requests
// not posted go again on their RTO.
func (t *erpcTransport) flushAll() error {
	var ferr error
	for _, q := range t.qps {
		if err := q.post(q.qp, uint64(2*erpcBufs+erpcSignalEvery), t.reapSends, t.st); err != nil && ferr == nil {
			ferr = fmt.Errorf("client: erpc: %w", err)
		}
	}
	return ferr
}

// Poll hands out the values of accepted answers and re-posts the RECVs
// it consumed, one chain per QP.
func (t *erpcTransport) Poll(now time.Duration, res []result) int {
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
		t.answersOf(qi, n, q.qp, t.st, func(payload []byte, arrived verbs.Time) {
			h, first, err := spec.DecodeERPC(payload)
			if err != nil || (h.Op != spec.ERPCOpAnswer && h.Op != spec.ERPCOpPong) {
				t.st.malformed.Add(1)
				return
			}
			if h.Session != t.session || q.sess == nil {
				t.st.forged.Add(1)
				return
			}
			if t.off.batchedClock {
				now = t.off.clock()
			}
			if h.Op == spec.ERPCOpPong {
				if !q.sess.Pong(now, h.ReqNum) {
					t.st.stale.Add(1)
				}
				return
			}
			switch q.sess.Answer(now, h.Slot, h.ReqNum, h.Count, first) {
			case spec.ERPCAccepted:
				// The callers move to the carry, delivered below; the
				// slot is free again at once.
				s := h.Slot
				if t.cc && !q.resent[s] {
					// The round trip ends when the answer reached the
					// host, not when this engine got to it: Timely's RTT
					// is a NIC's completion time, and a client away (a
					// descheduled thread, another session's work) is no
					// queue on the path.
					q.tl.Sample(now, t.arrived.by(now, arrived)-q.sentAt[s])
					q.sess.Rate = q.tl.Rate
				}
				q.calls[s] = t.accept(q.calls[s], first, q.rng[s])
				q.live[s] = 0
			case spec.ERPCReanswered:
				t.reanswered++
				t.st.stale.Add(1)
			default:
				t.st.stale.Add(1) // a duplicate, or an answer to an earlier request number
			}
		})
	}
	return k + t.drainCarry(res[k:])
}

// Expire runs each session's timers at now: go-back-N retransmissions,
// heartbeats, and failure detection (Broken). It returns how many
// requests it sent again.
func (t *erpcTransport) Expire(now time.Duration) int {
	if t.broken {
		return 0
	}
	if d, ok := t.NextDeadline(); !ok || now < d {
		return 0
	}
	if b, ok := t.dev.(verbs.DoorbellBatcher); ok {
		b.HoldDoorbell()
		defer b.RingDoorbell()
	}
	t.pace(now)
	n := 0
	for qi, q := range t.qps {
		if q.sess == nil {
			continue
		}
		if q.sess.Failed(now) {
			t.broken = true
			return n
		}
		t.resend = q.sess.GoBackN(now, t.resend[:0])
		if t.cc && len(t.resend) > 0 {
			q.tl.Timeout()
			q.sess.Rate = q.tl.Rate
		}
		for _, s := range t.resend {
			q.resent[s], q.wheeled[s] = true, 0 // sent now: the wheel's copy is skipped
			rn, k, _ := q.sess.Request(s)
			t.queue(qi, s, spec.ERPCHeader{Op: spec.ERPCOpRequest, Slot: s, Count: k, Session: t.session, ReqNum: rn})
			n++
		}
		if pn, ok := q.sess.Ping(now); ok {
			t.queue(qi, 0, spec.ERPCHeader{Op: spec.ERPCOpPing, Session: t.session, ReqNum: pn})
		}
	}
	t.flushAll()
	return n
}

// NextDeadline is when Expire next has work: while requests are in
// flight, the earliest of the sessions' retransmissions, failure
// timeouts and heartbeats, and the wheel's next request.
func (t *erpcTransport) NextDeadline() (time.Duration, bool) {
	if t.outstanding == 0 || t.broken {
		return 0, false
	}
	d, ok := time.Duration(0), false
	for _, q := range t.qps {
		if q.sess == nil {
			continue
		}
		if e := q.sess.NextEvent(); !ok || e < d {
			d, ok = e, true
		}
	}
	if e, wok := t.wheel.Next(); wok && (!ok || e < d) {
		d, ok = e, true
	}
	return d, ok
}

// Cancel drops id: its value, if its request is answered, is skipped.
// A request none of whose callers waits any more gives its slot and
// credit back, and an answer that still comes for it is stale.
func (t *erpcTransport) Cancel(id int) {
	if id < 0 || id >= len(t.where) || t.where[id].qi == refFree {
		return
	}
	r := t.where[id]
	t.where[id].qi = refFree
	t.outstanding--
	if r.qi == refCarried {
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
	if q.live[r.slot]--; q.live[r.slot] == 0 {
		q.sess.Cancel(r.slot)
		q.calls[r.slot] = q.calls[r.slot][:0]
	}
}

func (t *erpcTransport) reapSends() int { return reapSends(t.sendCQ, t.swcs, t.qps) }

// Close releases the transport's verbs resources (not the PD).
func (t *erpcTransport) Close() error {
	for _, q := range t.qps {
		closeAll(q.qp, q.ah)
	}
	t.qps = nil
	closeAll(t.reqMR, t.recvMR, t.recvCQ, t.sendCQ)
	return nil
}
