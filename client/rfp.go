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

func init() { transports[spec.ModeRFP] = dialRFP }

// WithRFPReads sets R, how many RDMA READs the rfp mode issues for one
// request before it asks the server to SEND the answer instead (default
// spec.RFPDefaultReads, the paper's R=5; 1..spec.RFPMaxReads). A small R
// gives up on fetching early (less in-bound load on the server's NIC,
// more out-bound SENDs); a large one keeps fetching through slow answers.
func WithRFPReads(r int) Option {
	return func(o *options) error {
		if r < 1 || r > spec.RFPMaxReads {
			return fmt.Errorf("%w: rfp reads %d (1..%d)", ErrConfig, r, spec.RFPMaxReads)
		}
		o.rfpReads = r
		return nil
	}
}

// rfpTransport is the rfp mode's data path (PROTOCOL.md, "RFP"): per
// client QP an RC QP that WRITEs requests into the QP's block of slots in
// server memory, READs the answers from the block of response records,
// and receives the fallback SENDs. One CQ takes every completion.
//
// Request ID id is window position id%window of QP id/window. Each
// position has at most one READ in flight, landing in its own buffer.
type rfpTransport struct {
	dev     verbs.Device
	cq      verbs.CQ
	slotMR  verbs.MR // per (qp, pos): the slot a WRITE carries (inline)
	readMR  verbs.MR // per (qp, pos): the record a READ lands in
	recvMR  verbs.MR // per (qp, recv): fallback SENDs
	qps     []*rfpQP
	window  int
	recvN   int // RECVs per QP
	reads   int // R
	timeout time.Duration
	tag     uint32 // the session's answer tag (Grant.AnswerQKey)
	busy    int
	broken  bool
	failed  []int // IDs of a broken QP, still to report
	why     error // the first failure
	st      *stats

	wcs     []verbs.WC
	recvWRs []verbs.RecvWR
	recvSGE []verbs.SGE

	// Reads counts READs posted, Fallbacks the requests answered by
	// SEND after R READs, Torn the records refused as torn.
	Reads, Fallbacks, Torn uint64
}

type rfpQP struct {
	qp                verbs.QP
	reqAddr, respAddr uint64
	reqKey, respKey   uint32
	pos               []rfpPos
	due               []timer // per position: its request's timeout (busy: seq is in flight)
	wrs               []verbs.SendWR
	sges              []verbs.SGE
	nwr               int
	broken            bool
}

type rfpPos struct {
	seq spec.RFPSeq
	// reading: a READ is in flight, posted for readSeq.
	reading bool
	readSeq spec.RFPSeq
	// deferred: seq's WRITE and READ wait for the READ in flight (one
	// READ per position, landing in its buffer; and no more than three
	// work requests of a position in the send queue).
	deferred bool
	tries    int  // READs of seq that did not find its record
	reply    bool // RFPOpReply written for seq: the SEND is awaited
}

var _ transport = (*rfpTransport)(nil)

// Work request kinds, in the top bits of a WR ID.
const (
	rfpKindWrite = iota
	rfpKindRead
	rfpKindRecv
)

func rfpWRID(kind, qi, i int) uint64 { return uint64(kind)<<48 | uint64(qi)<<24 | uint64(i) }

func rfpDecodeWRID(id uint64) (kind, qi, i int) {
	return int(id >> 48), int(id>>24) & 0xffffff, int(id & 0xffffff)
}

// RC timing: a lost packet is resent after about 17 ms, a dead server
// detected in about RetryCnt × 17 ms ≈ 0.12 s (the engine also notices a
// mode switch by the silence). Shorter timeouts (atomics' 4 ms) exhaust
// the retries of a busy userspace responder under loss.
const (
	rfpRCTimeout  = 12 // 4.096 µs × 2^12
	rfpRCRetryCnt = 7
)

// dialRFP admits the client in rfp mode with fresh RC QPs.
func dialRFP(ctx context.Context, env *transportEnv) (transport, error) {
	window := min(env.window, spec.RFPMaxWindow)
	t, err := newRFP(env.pd, env.dev, env.st, env.qps, window, env.rfpReads, env.retransmit)
	if err != nil {
		return nil, err
	}
	return admit(ctx, env, handshake.Admission{Window: window, QPs: t.endpoints()}, spec.ModeRFP, t)
}

// newRFP creates nqps RC QPs in RESET for up to window requests each;
// reads is R (0: the default), timeout how long a request waits before it
// is written again under a fresh seq.
func newRFP(pd verbs.PD, dev verbs.Device, st *stats, nqps, window, reads int, timeout time.Duration) (t *rfpTransport, err error) {
	if nqps < 1 || window < 1 || window > spec.RFPMaxWindow || reads < 0 || reads > spec.RFPMaxReads {
		return nil, fmt.Errorf("%w: rfp: %d QPs, window %d, R %d", ErrConfig, nqps, window, reads)
	}
	t = &rfpTransport{dev: dev, window: window, recvN: window + 8, reads: reads, timeout: timeout, st: st}
	if t.reads == 0 {
		t.reads = spec.RFPDefaultReads
	}
	if t.timeout <= 0 {
		t.timeout = spec.DefaultTimeout
	}
	defer func() {
		if err != nil {
			t.Close()
		}
	}()
	sqDepth := 4*window + 8
	if t.cq, err = dev.CreateCQ(nqps * (sqDepth + t.recvN)); err != nil {
		return nil, fmt.Errorf("client: rfp CQ: %w", err)
	}
	if t.slotMR, err = pd.RegMR(nqps*window*spec.RFPSlotLen, verbs.AccessLocalWrite); err != nil {
		return nil, fmt.Errorf("client: rfp slot buffers: %w", err)
	}
	if t.readMR, err = pd.RegMR(nqps*window*spec.RFPRecordLen, verbs.AccessLocalWrite); err != nil {
		return nil, fmt.Errorf("client: rfp read buffers: %w", err)
	}
	if t.recvMR, err = pd.RegMR(nqps*t.recvN*spec.RFPRecordLen, verbs.AccessLocalWrite); err != nil {
		return nil, fmt.Errorf("client: rfp receive buffers: %w", err)
	}
	for i := range nqps {
		q := &rfpQP{pos: make([]rfpPos, window), due: make([]timer, window), wrs: make([]verbs.SendWR, 3*window), sges: make([]verbs.SGE, 3*window)}
		t.qps = append(t.qps, q)
		if q.qp, err = pd.CreateQP(verbs.QPInitAttr{Type: verbs.RC, SendCQ: t.cq, RecvCQ: t.cq,
			Cap: verbs.QPCap{MaxSendWR: sqDepth, MaxRecvWR: t.recvN, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: spec.RFPSlotLen}}); err != nil {
			return nil, fmt.Errorf("client: rfp QP %d: %w", i, err)
		}
	}
	t.wcs = make([]verbs.WC, 64)
	t.recvWRs = make([]verbs.RecvWR, t.recvN)
	t.recvSGE = make([]verbs.SGE, t.recvN)
	for i := range t.recvWRs {
		t.recvWRs[i].SG = t.recvSGE[i : i+1]
	}
	return t, nil
}

// endpoints names the QPs for admission.
func (t *rfpTransport) endpoints() []handshake.Endpoint {
	return endpointsOf(t.qps, func(q *rfpQP) verbs.QP { return q.qp })
}

// attach connects the QPs, their RECVs posted before any request is
// written. For n QPs the grant has n server QPs and 2n PSNs, addresses
// and keys (PROTOCOL.md, "RFP").
func (t *rfpTransport) attach(g handshake.Grant) error {
	n := len(t.qps)
	t.window = min(t.window, g.Window)
	t.tag = g.AnswerQKey
	for i, q := range t.qps {
		s := g.ServerConnQPs[i]
		if err := verbs.Connect(q.qp, verbs.ConnectAttr{Remote: s.Addr, RemoteQPN: s.QPN,
			SQPSN: g.ConnPSNs[i], RQPSN: g.ConnPSNs[n+i],
			Timeout: rfpRCTimeout, RetryCnt: rfpRCRetryCnt}); err != nil {
			return fmt.Errorf("client: rfp QP %d connect: %w", i, err)
		}
		for r := range t.recvN {
			t.setRecv(r, i, r)
		}
		if _, err := q.qp.PostRecv(t.recvWRs[:t.recvN]); err != nil {
			return fmt.Errorf("client: rfp QP %d: post receives: %w", i, err)
		}
		q.reqAddr, q.reqKey = g.RemoteAddr[i], g.RKey[i]
		q.respAddr, q.respKey = g.RemoteAddr[n+i], g.RKey[n+i]
		q.pos, q.due = q.pos[:t.window], q.due[:t.window]
	}
	return nil
}

// setRecv fills recvWRs[i] with RECV r of QP qi.
func (t *rfpTransport) setRecv(i, qi, r int) {
	slot := qi*t.recvN + r
	t.recvWRs[i].ID = rfpWRID(rfpKindRecv, qi, r)
	t.recvSGE[i] = verbs.SGE{Addr: t.recvMR.Addr() + uint64(slot*spec.RFPRecordLen), Length: spec.RFPRecordLen, LKey: t.recvMR.LKey()}
}

func (t *rfpTransport) Free() int {
	if t.broken {
		return 0
	}
	return len(t.qps)*t.window - t.busy
}

func (t *rfpTransport) Outstanding() int { return t.busy }
func (t *rfpTransport) CQ() verbs.CQ     { return t.cq }
func (t *rfpTransport) Broken() bool     { return t.broken }

// Send writes the requests ids under fresh seqs, each followed by its
// first READ (RC executes them in order), one chain per QP.
func (t *rfpTransport) Send(now time.Duration, ids []int) (int, error) {
	if t.broken {
		return 0, nil
	}
	n := 0
	for _, id := range ids {
		qi, pos := id/t.window, id%t.window
		if id < 0 || qi >= len(t.qps) || t.qps[qi].due[pos].busy {
			break
		}
		t.qps[qi].due[pos].busy = true
		t.busy++
		t.issue(now, qi, pos)
		n++
	}
	return n, t.flush()
}

// issue queues a request of position pos under a fresh seq and its first
// READ, or, while a READ of the position is in flight, leaves both to
// its completion.
func (t *rfpTransport) issue(now time.Duration, qi, pos int) {
	q := t.qps[qi]
	p := &q.pos[pos]
	p.seq = p.seq.Next()
	p.tries, p.reply = 0, false
	q.due[pos].deadline = now + t.timeout
	if p.reading {
		p.deferred = true
		return
	}
	t.queueWrite(qi, pos, spec.RFPOpFetch)
	t.queueRead(qi, pos)
}

func (t *rfpTransport) queueWrite(qi, pos int, op uint8) {
	q := t.qps[qi]
	p := &q.pos[pos]
	idx := qi*cap(q.pos) + pos
	buf := t.slotMR.Bytes()[idx*spec.RFPSlotLen : (idx+1)*spec.RFPSlotLen]
	spec.PutRFPSlot(buf, op, p.seq) // op known, seq from Next: valid
	q.sges[q.nwr] = verbs.SGE{Addr: t.slotMR.Addr() + uint64(idx*spec.RFPSlotLen), Length: spec.RFPSlotLen, LKey: t.slotMR.LKey()}
	wr := &q.wrs[q.nwr]
	*wr = verbs.SendWR{ID: rfpWRID(rfpKindWrite, qi, pos), Opcode: verbs.OpRDMAWrite, Flags: verbs.Inline,
		SG: q.sges[q.nwr : q.nwr+1], RemoteAddr: q.reqAddr + uint64(pos*spec.RFPSlotLen), RKey: q.reqKey}
	if op == spec.RFPOpReply {
		// Not followed by a READ: signaled, so that its send queue entry
		// is reclaimed.
		wr.Flags |= verbs.Signaled
	}
	q.nwr++
}

func (t *rfpTransport) queueRead(qi, pos int) {
	q := t.qps[qi]
	p := &q.pos[pos]
	p.reading, p.readSeq = true, p.seq
	idx := qi*cap(q.pos) + pos
	q.sges[q.nwr] = verbs.SGE{Addr: t.readMR.Addr() + uint64(idx*spec.RFPRecordLen), Length: spec.RFPRecordLen, LKey: t.readMR.LKey()}
	q.wrs[q.nwr] = verbs.SendWR{ID: rfpWRID(rfpKindRead, qi, pos), Opcode: verbs.OpRDMARead, Flags: verbs.Signaled,
		SG: q.sges[q.nwr : q.nwr+1], RemoteAddr: q.respAddr + uint64(pos*spec.RFPRecordLen), RKey: q.respKey}
	q.nwr++
	t.Reads++
}

// flush posts every QP's queued work requests (one doorbell per QP; one
// system call for all on a device that batches doorbells) and re-posts
// consumed RECVs. A QP that refuses them is broken.
func (t *rfpTransport) flush() error {
	queued := false
	for _, q := range t.qps {
		queued = queued || q.nwr > 0
	}
	if !queued {
		return nil
	}
	if b, ok := t.dev.(verbs.DoorbellBatcher); ok {
		b.HoldDoorbell()
		defer b.RingDoorbell()
	}
	var ferr error
	for qi, q := range t.qps {
		if q.nwr == 0 {
			continue
		}
		posted, err := q.qp.PostSend(q.wrs[:q.nwr])
		t.st.doorbell(posted)
		if err != nil {
			// What was not posted will not complete: fail the QP's
			// requests now.
			for _, wr := range q.wrs[posted:q.nwr] {
				if k, _, pos := rfpDecodeWRID(wr.ID); k == rfpKindRead {
					q.pos[pos].reading = false
				}
			}
			if t.why == nil {
				t.why = fmt.Errorf("%w: QP %d: post: %w", errRFPBroken, qi, err)
			}
			t.breakQP(qi)
			if ferr == nil {
				ferr = t.why
			}
		}
		q.nwr = 0
	}
	return ferr
}

// breakQP marks QP qi broken: its busy requests are reported failed, and
// the transport takes no more (the engine reconnects).
func (t *rfpTransport) breakQP(qi int) {
	q := t.qps[qi]
	t.broken = true
	if q.broken {
		return
	}
	q.broken = true
	for pos := range q.due {
		if p := &q.due[pos]; p.busy {
			p.busy = false
			t.busy--
			t.failed = append(t.failed, qi*t.window+pos)
		}
	}
}

var errRFPBroken = errors.New("client: rfp queue pair failed")

// Poll takes answers: records a READ found, and fallback SENDs.
func (t *rfpTransport) Poll(now time.Duration, res []result) int {
	k := 0
	for ; k < len(res) && len(t.failed) > 0; k++ {
		res[k] = result{ID: t.failed[0], Err: t.why}
		t.failed = t.failed[1:]
	}
	if k == len(res) {
		return k
	}
	n, err := t.cq.Poll(t.wcs[:min(len(res)-k, len(t.wcs))])
	if err != nil || n == 0 {
		return k
	}
	for i := range t.wcs[:n] {
		wc := &t.wcs[i]
		kind, qi, x := rfpDecodeWRID(wc.ID)
		if qi >= len(t.qps) {
			continue
		}
		q := t.qps[qi]
		if wc.Status != verbs.WCSuccess {
			if kind == rfpKindRead && x < len(q.pos) {
				q.pos[x].reading = false
			}
			if t.why == nil {
				t.why = fmt.Errorf("%w: QP %d: %w", errRFPBroken, qi, wc.Err())
			}
			t.breakQP(qi)
			continue
		}
		switch kind {
		case rfpKindRead:
			if x < len(q.pos) && t.read(qi, x, &res[k]) {
				k++
			}
		case rfpKindRecv:
			if x >= t.recvN {
				continue
			}
			if t.reply(qi, x, wc, &res[k]) {
				k++
			}
			// Re-posted at once: fallback SENDs are rare, there is no
			// chain to build. A refused RECV only shrinks the queue (the
			// server's SEND then waits out an RNR retry).
			t.setRecv(0, qi, x)
			q.qp.PostRecv(t.recvWRs[:1])
		}
	}
	t.flush()
	return k
}

// read handles a completed READ of position pos: the answer if the record
// holds the current seq, else another READ, or after R of them the
// request for a reply.
func (t *rfpTransport) read(qi, pos int, r *result) bool {
	q := t.qps[qi]
	p := &q.pos[pos]
	p.reading = false
	if !q.due[pos].busy {
		p.deferred = false
		return false // cancelled
	}
	if p.deferred {
		// The READ was of an earlier seq, whose WRITE is not even posted.
		p.deferred = false
		t.queueWrite(qi, pos, spec.RFPOpFetch)
		t.queueRead(qi, pos)
		return false
	}
	idx := qi*cap(q.pos) + pos
	v, err := spec.CheckRFPRecord(t.readMR.Bytes()[idx*spec.RFPRecordLen:(idx+1)*spec.RFPRecordLen], t.tag, p.seq)
	if err == nil {
		t.done(qi, pos)
		*r = result{ID: qi*t.window + pos, Value: v}
		return true
	}
	if errors.Is(err, spec.ErrRFPTorn) {
		t.Torn++
		t.st.stale.Add(1)
	}
	if p.reply {
		return false // the SEND is on its way
	}
	if p.readSeq == p.seq {
		p.tries++
	}
	if p.tries < t.reads {
		t.queueRead(qi, pos)
		return false
	}
	// R READs found nothing: the server-reply mode for this request.
	p.reply = true
	t.Fallbacks++
	t.queueWrite(qi, pos, spec.RFPOpReply)
	return false
}

// reply handles a fallback SEND received on QP qi.
func (t *rfpTransport) reply(qi, slot int, wc *verbs.WC, r *result) bool {
	q := t.qps[qi]
	if wc.Flags&verbs.WCWithImm == 0 {
		t.st.malformed.Add(1)
		return false
	}
	pos, err := spec.DecodeRFPReply(wc.Imm, t.window, int(wc.ByteLen))
	if err != nil {
		t.st.malformed.Add(1)
		return false
	}
	p := &q.pos[pos]
	off := (qi*t.recvN + slot) * spec.RFPRecordLen
	if !q.due[pos].busy {
		t.st.stale.Add(1)
		return false
	}
	v, err := spec.CheckRFPRecord(t.recvMR.Bytes()[off:off+spec.RFPRecordLen], t.tag, p.seq)
	if err != nil {
		t.st.stale.Add(1) // the answer to an earlier seq of the slot
		return false
	}
	t.done(qi, pos)
	*r = result{ID: qi*t.window + pos, Value: v}
	return true
}

func (t *rfpTransport) done(qi, pos int) {
	t.qps[qi].due[pos].busy = false
	t.busy--
}

// Expire writes every request that waited longer than the timeout again,
// under a fresh seq (the server dropped it: too old, or the oracle
// behind), and returns how many.
func (t *rfpTransport) Expire(now time.Duration) int {
	if t.broken {
		return 0
	}
	n := expire(t.qps, now, func(qi, pos int) { t.issue(now, qi, pos) }, nil)
	if n > 0 {
		t.flush()
	}
	return n
}

// NextDeadline is when the earliest outstanding request expires.
func (t *rfpTransport) NextDeadline() (time.Duration, bool) { return nextDeadline(t.qps) }

func (q *rfpQP) timers() []timer { return q.due }

// Cancel gives up on request id: its seq is retired, so neither a record
// nor a SEND of it is taken any more.
func (t *rfpTransport) Cancel(id int) {
	qi, pos := id/t.window, id%t.window
	if id < 0 || qi >= len(t.qps) {
		return
	}
	if q := t.qps[qi]; q.due[pos].busy {
		q.due[pos].busy = false
		q.pos[pos].seq = q.pos[pos].seq.Next()
		t.busy--
	}
}

// Close releases the transport's verbs resources (not the PD).
func (t *rfpTransport) Close() error {
	for _, q := range t.qps {
		closeAll(q.qp)
	}
	t.qps = nil
	closeAll(t.slotMR, t.readMR, t.recvMR, t.cq)
	return nil
}
