package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/seqd/seqd/admin/handshake"
	"github.com/seqd/seqd/spec"
	"github.com/seqd/seqd/verbs"
)

func init() { transports[spec.ModeSpecS0] = dialSpecS0 }

const (
	recvSlot    = verbs.GRHLen + 64
	signalEvery = 16
	// recvSpare is how many receives a QP has beyond its window. Flush
	// holds back up to half of them, and posts them together with the
	// requests of the step in which half have gathered: a serial caller
	// posts its receives once every recvSpare/2 calls, its requests alone
	// in between.
	recvSpare = 16
)

// predictHigh makes Spec-S0 clients predict the high part's advance
// (spec.Speculator.SetPeriod). Tests and benchmarks turn it off to compare;
// it is read when a client connects.
var predictHigh = true

// errMalformed is a result's error for an answer that matched its request
// but could not be decoded: the engine sends the request again.
var errMalformed = errors.New("client: malformed answer")

// specS0 is the Spec-S0 data path: header-only UD SENDs whose immediate
// carries a tag and a guess of the value's high part (PROTOCOL.md). Each
// QP has a spec.Window matching answers to tags; a request that waits
// longer than the retransmission timeout is sent again under a fresh tag.
// Its QPs outlive reconnects: a dialer handed a specS0 as prev re-runs
// Connect with the same QPs.
type specS0 struct {
	env *transportEnv
	// cq takes the receives and the sends of every QP: the engine's step
	// polls it once, and posts receives and sends together in one call
	// (Flush): two provider crossings per batch (issue 16).
	cq     verbs.CQ
	recvMR verbs.MR
	// recvBase and recvKey are recvMR's address and LKey, read once:
	// every receive posted again gathers into it (recvSGE).
	recvBase uint64
	recvKey  uint32
	qps      []*s0QP
	ahs      []verbs.AH
	srvQPN   []verbs.QPN
	qkey     uint32        // the request Q_Key (the server QPs')
	ansQKey  uint32        // the session's answer Q_Key, set on every client QP
	srvResp  verbs.Senders // the server's response QPs: answers come only from these
	epoch    uint64
	spec     spec.Speculator

	// By engine request ID: the QP and tag it is in flight under, the
	// high part its answer completes (^0: sent without a guess), and its
	// backoff (spec.Window.SendBackoff: raised by each answer to a copy
	// of it that expired).
	idQP    []int
	idTag   []spec.Tag
	high    []uint64
	backoff []int
	pending []int // expired but not resent yet (no tag free): resent first
	now     time.Duration
	arrived arrivals // when an answer reached the host, at the latest

	wcs     []verbs.WC
	expired []spec.Expired
	chains  []verbs.RecvChain // Flush's
}

// recvBit marks a receive's work request ID (recvBit | QP index << 32 |
// slot); a send's is its sequence number on the QP << 8 | the QP index.
// Error completions carry no valid opcode (ibv_poll_cq(3)): the ID tells
// them apart.
const recvBit = 1 << 63

type s0QP struct {
	qp      verbs.QP
	win     *spec.Window
	granted int
	server  int // index into the server endpoints
	posted  uint64
	done    uint64
	wrs     []verbs.SendWR
	nwr     int // work requests in wrs not posted yet (Flush posts them)
	// recvs[:nrecv] are the receives to post again (Flush), each
	// gathering into its sges entry.
	recvs []verbs.RecvWR
	sges  []verbs.SGE
	nrecv int
}

// dialSpecS0 (re-)connects in Spec-S0: on prev's QPs when prev is a
// specS0, else on new ones.
func dialSpecS0(ctx context.Context, env *transportEnv) (transport, error) {
	s, ok := env.prev.(*specS0)
	if !ok {
		var err error
		if s, err = newSpecS0(env); err != nil {
			return nil, err
		}
	}
	s.env = env
	if err := s.connect(ctx); err != nil {
		if !ok {
			s.Close()
		}
		return nil, err
	}
	return s, nil
}

func newSpecS0(env *transportEnv) (s *specS0, err error) {
	s = &specS0{env: env}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	perQP := env.window + recvSpare
	sendDepth := 2*env.window + 2*signalEvery
	// Room for every receive and every send WR in flight, not only the
	// signaled ones: a QP that goes to ERR flushes them all, unsignaled
	// too (ibv_poll_cq(3)), and an overrun CQ cannot be used again.
	if s.cq, err = env.dev.CreateCQ(env.qps * (perQP + sendDepth + 1)); err != nil {
		return nil, fmt.Errorf("client: CQ: %w", err)
	}
	if s.recvMR, err = env.pd.RegMR(env.qps*perQP*recvSlot, verbs.AccessLocalWrite); err != nil {
		return nil, fmt.Errorf("client: receive buffers: %w", err)
	}
	s.recvBase, s.recvKey = s.recvMR.Addr(), s.recvMR.LKey()
	s.wcs = make([]verbs.WC, 64)
	s.chains = make([]verbs.RecvChain, 0, env.qps)
	s.sizeIDs(env.qps * env.window)
	// The client's clock (env.now) and the provider's (verbs.Now) are
	// both the monotonic clock, from different zeros: the client's is
	// env.start. (Taken from two readings, one of each clock, the zero
	// was off by the time between them: a goroutine descheduled there
	// for 30 ms on a loaded host put every receive stamp of the session
	// 30 ms early, so each answer looked to have arrived before its
	// request left, and was rejected as late, for good.)
	s.arrived = newArrivals(env)
	for i := range env.qps {
		qp, err := env.pd.CreateQP(verbs.QPInitAttr{Type: verbs.UD, SendCQ: s.cq, RecvCQ: s.cq,
			Cap: verbs.QPCap{MaxSendWR: sendDepth, MaxRecvWR: perQP, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			return nil, fmt.Errorf("client: QP %d: %w", i, err)
		}
		win, err := spec.NewWindow(spec.WindowConfig{Size: env.window, Timeout: env.retransmit})
		if err != nil {
			qp.Close()
			return nil, fmt.Errorf("%w: %v", ErrConfig, err)
		}
		q := &s0QP{qp: qp, win: win, wrs: make([]verbs.SendWR, env.window),
			recvs: make([]verbs.RecvWR, perQP), sges: make([]verbs.SGE, perQP)}
		for k := range q.recvs {
			q.recvs[k].SG = q.sges[k : k+1]
		}
		s.qps = append(s.qps, q)
	}
	return s, nil
}

// maxBackoff bounds a request's backoff (spec.Window.TimeoutOf caps
// the timeout it gives at spec.MaxBackoff timeouts, six steps).
const maxBackoff = 6

// sizeIDs makes the by-ID tables for engine request IDs 0..n-1.
func (s *specS0) sizeIDs(n int) {
	s.idQP, s.idTag, s.high, s.backoff = make([]int, n), make([]spec.Tag, n), make([]uint64, n), make([]int, n)
	for i := range s.idQP {
		s.idQP[i] = -1
	}
	s.pending = make([]int, 0, n)
}

// postInitialRecvs fills QP i's receive queue (once it is out of RESET).
func (s *specS0) postInitialRecvs(i int) error {
	q := s.qps[i]
	perQP := len(q.recvs)
	for k := range perQP {
		q.recvs[k].ID = recvBit | uint64(i)<<32 | uint64(i*perQP+k)
		q.sges[k] = s.recvSGE(uint64(i*perQP + k))
	}
	q.nrecv = 0
	if _, err := q.qp.PostRecv(q.recvs); err != nil {
		return fmt.Errorf("client: QP %d: post receives: %w", i, err)
	}
	return nil
}

// recvSGE is the buffer of receive slot slot.
func (s *specS0) recvSGE(slot uint64) verbs.SGE {
	return verbs.SGE{Addr: s.recvBase + slot*recvSlot, Length: recvSlot, LKey: s.recvKey}
}

// connect runs Connect with the QPs through the shared grant path and
// attaches them to the grant.
func (s *specS0) connect(ctx context.Context) error {
	a := handshake.Admission{Window: s.env.window, QPs: endpointsOf(s.qps, func(q *s0QP) verbs.QP { return q.qp })}
	sent := s.env.now() // Connect's high is at least this fresh (PROTOCOL.md)
	g, err := grant(ctx, s.env, a, spec.ModeSpecS0)
	if err != nil {
		return err
	}
	return s.attach(g, sent)
}

// attach brings the QPs up for grant g (with the session's answer Q_Key)
// and builds the address handles; g.High is knowledge as of sent, when
// the Connect was sent. The QPs outlive a failed attach: the next
// connect attaches them again.
func (s *specS0) attach(g handshake.Grant, sent time.Duration) error {
	for _, ah := range s.ahs {
		ah.Close()
	}
	s.ahs, s.srvQPN = s.ahs[:0], s.srvQPN[:0]
	for _, ep := range g.ServerQPs {
		ah, err := s.env.pd.CreateAH(verbs.AHAttr{Dest: ep.Addr, PortNum: 1})
		if err != nil {
			return fmt.Errorf("client: address handle for %v: %w", ep.Addr, err)
		}
		s.ahs = append(s.ahs, ah)
		s.srvQPN = append(s.srvQPN, ep.QPN)
	}
	for i, q := range s.qps {
		if q.qp.State() == verbs.StateReset {
			if err := verbs.BringUpUD(q.qp, g.AnswerQKey, 0); err != nil {
				return fmt.Errorf("client: QP %d bring-up: %w", i, err)
			}
			if err := s.postInitialRecvs(i); err != nil {
				return err
			}
		} else if g.AnswerQKey != s.ansQKey {
			if err := q.qp.Modify(&verbs.QPAttr{QKey: g.AnswerQKey}, verbs.AttrQKey); err != nil {
				return fmt.Errorf("client: QP %d Q_Key: %w", i, err)
			}
		}
		q.server = int(g.Assignment[i])
		q.granted = min(g.Window, s.env.window)
	}
	if s.epoch != g.Epoch {
		s.spec.Forget()
	}
	period := time.Duration(0)
	if predictHigh {
		period = spec.HighPeriod(g.Format)
	}
	s.spec.SetPeriod(period) // predict the high part's advance (PROTOCOL.md)
	s.epoch = g.Epoch
	clear(s.backoff) // a new grant, a new path: requests wait the timeout again
	s.qkey, s.ansQKey, s.srvResp = g.QKey, g.AnswerQKey, sendersOf(g.AnswerQPs)
	if g.High != 0 {
		s.spec.Learn(sent, g.High)
	}
	return nil
}

func (s *specS0) Free() int {
	n := -len(s.pending)
	for _, q := range s.qps {
		n += q.granted - q.win.Outstanding()
	}
	return max(n, 0)
}

func (s *specS0) Outstanding() int {
	n := len(s.pending)
	for _, q := range s.qps {
		n += q.win.Outstanding()
	}
	return n
}

// Send queues ids, one chain per QP, the QPs filled in turn; Flush posts
// them at the end of the engine's step.
func (s *specS0) Send(now time.Duration, ids []int) (int, error) {
	s.now = now
	for _, id := range ids {
		s.backoff[id] = 0
	}
	return s.send(now, ids), nil
}

// send queues ids under fresh tags on the QPs' chains and returns how
// many it took (a prefix).
func (s *specS0) send(now time.Duration, ids []int) int {
	took := 0
	for qi, q := range s.qps {
		for took < len(ids) && q.win.Outstanding() < q.granted && q.nwr < len(q.wrs) {
			if !s.queue(now, qi, ids[took]) {
				break
			}
			took++
		}
	}
	return took
}

// queue adds request id to QP qi's chain under a fresh tag and guess;
// false when the QP cannot take it now.
func (s *specS0) queue(now time.Duration, qi, id int) bool {
	q := s.qps[qi]
	n := q.nwr
	if q.posted-q.done+uint64(n)+1 >= uint64(cap(q.wrs)+2*signalEvery) {
		return false
	}
	tag, _, err := q.win.SendBackoff(now, uint64(id), s.backoff[id])
	if err != nil {
		return false
	}
	guess, high := s.spec.Guess(now)
	if guess == spec.NoGuess {
		high = ^uint64(0)
	}
	s.idQP[id], s.idTag[id], s.high[id] = qi, tag, high
	seq := q.posted + uint64(n)
	wr := &q.wrs[n]
	*wr = verbs.SendWR{ID: seq<<8 | uint64(qi), Opcode: verbs.OpSendWithImm,
		Imm: uint32(spec.MustRequestImm(tag, guess)), AH: s.ahs[q.server],
		RemoteQPN: s.srvQPN[q.server], RemoteQKey: s.qkey}
	if seq%signalEvery == signalEvery-1 {
		wr.Flags = verbs.Signaled
	}
	q.nwr++
	return true
}

// Flush posts, at the end of the engine's step, the requests queued and,
// once half a QP's spare receives wait to be posted again, the receives:
// every QP's receives and the first chain of requests in one call into
// the provider (verbs.PostMany), the other QPs' chains (several QPs
// sending in one step) after it, under one doorbell where the device
// batches them. A lone chain of requests with no receives due goes out
// on its own (one PostSend, which is its doorbell): a serial caller posts
// its receives once every recvSpare/2 calls, not before every request.
// Requests not posted stay in their window and are resent on expiry.
func (s *specS0) Flush() {
	var sq *s0QP
	due, more := false, false
	for _, q := range s.qps {
		if q.nwr > 0 {
			more = more || sq != nil
			if sq == nil {
				sq = q
			}
		}
		due = due || q.nrecv >= recvSpare/2
	}
	if !due {
		if sq == nil {
			return // the receives wait
		}
		if !more {
			n, err := sq.qp.PostSend(sq.wrs[:sq.nwr])
			s.posted(sq, n, err)
			return
		}
	}
	chains := s.chains[:0]
	for _, q := range s.qps {
		if q.nrecv > 0 {
			chains = append(chains, verbs.RecvChain{QP: q.qp, WRs: q.recvs[:q.nrecv]})
		}
	}
	if b, ok := s.env.dev.(verbs.DoorbellBatcher); ok && sq != nil {
		b.HoldDoorbell()
		defer b.RingDoorbell()
	}
	var sqp verbs.QP
	var sends []verbs.SendWR
	if sq != nil {
		sqp, sends = sq.qp, sq.wrs[:sq.nwr]
	}
	n, err := verbs.PostMany(s.env.dev, chains, sqp, sends)
	for i := range chains {
		if c := &chains[i]; c.Posted < len(c.WRs) && err != nil {
			s.env.log.Warn("re-post receives", "posted", c.Posted, "of", len(c.WRs), "err", err)
		}
	}
	for _, q := range s.qps {
		q.nrecv = 0
	}
	if sq != nil {
		s.posted(sq, n, err)
	}
	for _, q := range s.qps {
		if q.nwr > 0 {
			n, err := q.qp.PostSend(q.wrs[:q.nwr])
			s.posted(q, n, err)
		}
	}
	clear(chains) // no QP kept alive by the scratch
}

// posted records that n of q's queued requests were posted.
func (s *specS0) posted(q *s0QP, n int, err error) {
	q.posted += uint64(n)
	s.env.st.doorbell(n)
	if err != nil {
		s.env.log.Warn("post requests", "posted", n, "of", q.nwr, "err", err)
	}
	q.nwr = 0
}

// Poll takes completions from the shared CQ: send completions free send
// queue slots; each receive is queued to be posted again (Flush) and its
// answer matched.
func (s *specS0) Poll(now time.Duration, res []result) int {
	s.now = now
	n, err := s.cq.Poll(s.wcs[:min(len(res), len(s.wcs))])
	if err != nil || n == 0 {
		return 0
	}
	buf := s.recvMR.Bytes()
	k := 0
	for i := range s.wcs[:n] {
		wc := &s.wcs[i]
		if wc.ID&recvBit == 0 {
			if qi := int(wc.ID & 0xff); qi < len(s.qps) {
				if seq := wc.ID >> 8; seq+1 > s.qps[qi].done {
					s.qps[qi].done = seq + 1
				}
			}
			continue
		}
		qi := int(wc.ID >> 32 & 0x7fff_ffff)
		if qi >= len(s.qps) {
			continue
		}
		q := s.qps[qi]
		slot := wc.ID & 0xffff_ffff
		if q.nrecv < len(q.recvs) {
			q.recvs[q.nrecv].ID = wc.ID
			q.sges[q.nrecv] = s.recvSGE(slot)
			q.nrecv++
		}
		if wc.Status != verbs.WCSuccess || wc.Flags&verbs.WCWithImm == 0 || wc.ByteLen < verbs.GRHLen {
			s.env.st.malformed.Add(1)
			continue
		}
		if !s.srvResp.Match(wc) {
			s.env.st.forged.Add(1) // not from the server's response QPs
			continue
		}
		off := slot*recvSlot + verbs.GRHLen
		if s.answer(now, s.arrived.by(now, wc.Arrived), q, spec.Imm(wc.Imm), buf[off:off+uint64(wc.ByteLen)-verbs.GRHLen], &res[k]) {
			k++
		}
	}
	return k
}

// answer matches one answer, which reached the host no later than by,
// to its request and decodes it into r. An answer that arrived before
// the request outstanding under its tag was sent answers an earlier use
// of the tag, held up on the way to the engine: stale, and counted late
// (spec.Window.AnswerArrived).
func (s *specS0) answer(now, by time.Duration, q *s0QP, imm spec.Imm, payload []byte, r *result) bool {
	cookie, sent, ok, late := q.win.AnswerArrived(now, by, imm.Tag())
	if !ok {
		s.env.st.stale.Add(1)
		if late {
			s.env.st.late.Add(1)
		} else if c, b, slow := q.win.ExpiredAnswer(imm.Tag()); slow && c < uint64(len(s.backoff)) {
			// The answer to a copy given up on: this request's answers
			// come back slower than it waits. (If the request was
			// answered since and its ID reused, the next request waits
			// longer once; no more.)
			s.backoff[c] = max(s.backoff[c], min(b+1, maxBackoff))
		}
		return false
	}
	id := int(cookie)
	s.idQP[id] = -1
	high := s.high[id]
	if high == ^uint64(0) {
		high = 0
		if len(payload) != spec.FullLen {
			s.env.st.malformed.Add(1) // a confirmation of no guess
			*r = result{ID: id, Err: errMalformed}
			return true
		}
	}
	v, full, err := spec.DecodeAnswer(imm, payload, high)
	if err != nil {
		s.env.st.malformed.Add(1)
		*r = result{ID: id, Err: errMalformed}
		return true
	}
	if full {
		s.env.st.specMisses.Add(1)
	}
	s.spec.Learn(now, v)
	s.spec.Observe(sent, v)
	*r = result{ID: id, Value: v}
	return true
}

// Expire resends, under fresh tags, the requests that waited longer than
// the retransmission timeout.
func (s *specS0) Expire(now time.Duration) int {
	s.now = now
	for _, q := range s.qps {
		s.expired = q.win.Expire(now, s.expired[:0])
		for _, e := range s.expired {
			id := int(e.Cookie)
			s.idQP[id] = -1
			s.pending = append(s.pending, id)
		}
	}
	if len(s.pending) == 0 {
		return 0
	}
	sent := s.send(now, s.pending)
	s.pending = s.pending[:copy(s.pending, s.pending[sent:])]
	return sent
}

func (s *specS0) NextDeadline() (time.Duration, bool) {
	if len(s.pending) > 0 {
		return s.now, true
	}
	var d time.Duration
	ok := false
	for _, q := range s.qps {
		if t, has := q.win.NextDeadline(); has && (!ok || t < d) {
			d, ok = t, true
		}
	}
	return d, ok
}

func (s *specS0) CQ() verbs.CQ { return s.cq }

func (s *specS0) Broken() bool { return false }

func (s *specS0) Cancel(id int) {
	if qi := s.idQP[id]; qi >= 0 {
		s.qps[qi].win.Cancel(s.now, s.idTag[id])
		s.idQP[id] = -1
		return
	}
	for i, p := range s.pending {
		if p == id {
			s.pending = append(s.pending[:i], s.pending[i+1:]...)
			return
		}
	}
}

func (s *specS0) Close() error {
	for _, q := range s.qps {
		q.qp.Close()
	}
	s.qps = nil
	for _, ah := range s.ahs {
		ah.Close()
	}
	s.ahs = nil
	if s.recvMR != nil {
		s.recvMR.Close()
	}
	if s.cq != nil {
		s.cq.Close()
	}
	return nil
}
