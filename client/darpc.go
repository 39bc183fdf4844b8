package client

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/seqd/seqd/admin/handshake"
	"github.com/seqd/seqd/spec"
	"github.com/seqd/seqd/verbs"
)

// The DaRPC transport (mode darpc, PROTOCOL.md "DaRPC"): one RC QP per
// client QP, connected to a server QP of its own. The requests waiting
// for a QP go out as one call message (call ID, count k), and the server
// answers it with one message carrying the first of k consecutive values.
// RC delivers every message once and in order, and retransmits lost
// packets itself: the transport never resends (Expire returns 0). A
// refused message (the server could not answer within its residence
// bound) hands its requests back to the engine with an error, to be sent
// again under a new call ID; a failed QP, or one whose oldest message
// waited spec.DaRPCStall, breaks the transport and the engine reconnects.

func init() { transports[spec.ModeDaRPC] = dialDaRPC }

var (
	errDaRPCRefused = errors.New("client: darpc: the server refused the calls (too old to answer); sent again")
	errDaRPCBroken  = errors.New("client: darpc: connection failed")
)

// RC timing of the client's QPs: a lost call is resent after about 17 ms.
const (
	darpcRCTimeout  = 12
	darpcRCRetryCnt = 7
	darpcCallStride = 16 // call buffer stride (DaRPCCallLen rounded up)
	darpcRecvStride = 32 // answer buffer: an answer is DaRPCAnswerLen
	darpcSendBit    = uint64(1) << 63
)

// darpcLoc is where an engine request travels.
type darpcLoc struct {
	qp, slot, idx int
	inflight      bool
}

type darpcQP struct {
	qp   verbs.QP
	ring *spec.DaRPCRing
	// calls[slot] are the engine IDs of the message in ring slot slot,
	// -1 for a request cancelled or failed meanwhile.
	calls [][]int
	base  uint64 // this QP's call buffers in the MR; its answer buffers follow
	wrs   []verbs.SendWR
	sges  []verbs.SGE
	ids   []uint64 // call IDs of the chain being posted
	rwrs  []verbs.RecvWR
	rsges []verbs.SGE
	dead  bool
}

type darpcTransport struct {
	dev    verbs.Device
	st     *stats
	cq     verbs.CQ
	mr     verbs.MR
	qps    []*darpcQP
	window int
	stall  time.Duration
	loc    []darpcLoc // by engine ID
	live   int        // requests in flight, not cancelled
	broken bool
	out    []result // results waiting for Poll
	wcs    []verbs.WC
	next   int // the QP the next Send starts at
}

var _ transport = (*darpcTransport)(nil)

// dialDaRPC creates the QPs, admits them and connects them to the grant.
func dialDaRPC(ctx context.Context, env *transportEnv) (transport, error) {
	window := min(max(env.window, 1), spec.DaRPCMaxWindow)
	t, err := newDaRPC(env.dev, env.pd, env.st, env.qps, window)
	if err != nil {
		return nil, err
	}
	eps := endpointsOf(t.qps, func(q *darpcQP) verbs.QP { return q.qp })
	return admit(ctx, env, handshake.Admission{Window: window, QPs: eps}, spec.ModeDaRPC, t)
}

// newDaRPC creates nqps RC QPs in RESET, a CQ and the buffers for a
// window of up to window calls per QP.
func newDaRPC(dev verbs.Device, pd verbs.PD, st *stats, nqps, window int) (t *darpcTransport, err error) {
	if nqps < 1 || nqps > 1<<15 || window < 1 || window > spec.DaRPCMaxWindow {
		return nil, fmt.Errorf("%w: darpc: %d QPs, window %d", ErrConfig, nqps, window)
	}
	t = &darpcTransport{dev: dev, st: st, window: window, stall: spec.DaRPCStall}
	defer func() {
		if err != nil {
			t.Close()
		}
	}()
	// Per QP: window answers, and up to 2 × window calls whose
	// completions (acknowledgements) are not yet polled.
	if t.cq, err = dev.CreateCQ(3 * nqps * window); err != nil {
		return nil, fmt.Errorf("client: darpc CQ: %w", err)
	}
	per := window * (darpcCallStride + darpcRecvStride)
	if t.mr, err = pd.RegMR(nqps*per, verbs.AccessLocalWrite); err != nil {
		return nil, fmt.Errorf("client: darpc buffers: %w", err)
	}
	for i := range nqps {
		q := &darpcQP{base: uint64(i * per)}
		t.qps = append(t.qps, q)
		if q.qp, err = pd.CreateQP(verbs.QPInitAttr{Type: verbs.RC, SendCQ: t.cq, RecvCQ: t.cq,
			Cap: verbs.QPCap{MaxSendWR: 2 * window, MaxRecvWR: window, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
			return nil, fmt.Errorf("client: darpc QP %d: %w", i, err)
		}
	}
	t.wcs = make([]verbs.WC, 64)
	return t, nil
}

// attach connects QP i to g.ServerConnQPs[i], both directions starting
// at g.ConnPSNs[i], posts its answer receives and sets up its window of
// g.Window calls.
func (t *darpcTransport) attach(g handshake.Grant) error {
	granted := g.Window
	t.window = granted
	t.loc = make([]darpcLoc, len(t.qps)*granted)
	t.out = make([]result, 0, len(t.loc))
	var seed [8]byte
	rand.Read(seed[:])
	first := binary.LittleEndian.Uint64(seed[:])
	per := min(granted, spec.DaRPCMaxCalls)
	for i, q := range t.qps {
		p, psn := g.ServerConnQPs[i], g.ConnPSNs[i]
		if err := verbs.Connect(q.qp, verbs.ConnectAttr{Remote: p.Addr, RemoteQPN: p.QPN, RQPSN: psn, SQPSN: psn,
			Timeout: darpcRCTimeout, RetryCnt: darpcRCRetryCnt}); err != nil {
			return fmt.Errorf("%w: connect: darpc QP %d: %v", ErrUnavailable, i, err)
		}
		// Call IDs: random per connection, consecutive within it.
		q.ring = spec.NewDaRPCRing(granted, first+uint64(i)<<48)
		q.calls = make([][]int, granted)
		for s := range q.calls {
			q.calls[s] = make([]int, 0, per)
		}
		q.wrs = make([]verbs.SendWR, 0, granted)
		q.sges = make([]verbs.SGE, granted)
		q.ids = make([]uint64, 0, granted)
		q.rwrs = make([]verbs.RecvWR, 0, granted)
		q.rsges = make([]verbs.SGE, granted)
		for b := range granted {
			t.addRecv(i, b)
		}
		if _, err := q.qp.PostRecv(q.rwrs); err != nil {
			return fmt.Errorf("%w: connect: darpc QP %d receives: %v", ErrUnavailable, i, err)
		}
		q.rwrs = q.rwrs[:0]
	}
	return nil
}

// addRecv adds answer buffer b of QP qi to the QP's re-post chain.
func (t *darpcTransport) addRecv(qi, b int) {
	q := t.qps[qi]
	off := q.base + uint64(t.window*darpcCallStride+b*darpcRecvStride)
	q.rsges[b] = verbs.SGE{Addr: t.mr.Addr() + off, Length: darpcRecvStride, LKey: t.mr.LKey()}
	q.rwrs = append(q.rwrs, verbs.RecvWR{ID: uint64(qi)<<16 | uint64(b), SG: q.rsges[b : b+1]})
}

func (t *darpcTransport) Free() int {
	if t.broken {
		return 0
	}
	n := 0
	for _, q := range t.qps {
		if !q.dead && q.ring != nil {
			n += q.ring.Free()
		}
	}
	return n
}

func (t *darpcTransport) Outstanding() int { return t.live }

func (t *darpcTransport) CQ() verbs.CQ { return t.cq }

func (t *darpcTransport) Broken() bool { return t.broken }

// Send puts the requests into as few call messages as the QPs' windows
// allow (up to spec.DaRPCMaxCalls each), one chain per QP, under one held
// doorbell where the device batches.
func (t *darpcTransport) Send(now time.Duration, ids []int) (int, error) {
	if t.broken || len(t.qps) == 0 || t.loc == nil {
		return 0, nil
	}
	for _, id := range ids {
		if id < 0 || id >= len(t.loc) || t.loc[id].inflight {
			return 0, fmt.Errorf("%w: darpc: request ID %d out of range or in flight", ErrConfig, id)
		}
	}
	if b, ok := t.dev.(verbs.DoorbellBatcher); ok {
		b.HoldDoorbell()
		defer b.RingDoorbell()
	}
	taken := 0
	start := t.next
	t.next = (t.next + 1) % len(t.qps)
	for k := range t.qps {
		if taken == len(ids) {
			break
		}
		qi := (start + k) % len(t.qps)
		q := t.qps[qi]
		if q.dead {
			continue
		}
		q.wrs, q.ids = q.wrs[:0], q.ids[:0]
		for taken < len(ids) {
			n := min(q.ring.Free(), spec.DaRPCMaxCalls, len(ids)-taken)
			if n == 0 {
				break
			}
			cid, slot, ok := q.ring.Open(now, n)
			if !ok {
				break
			}
			off := q.base + uint64(slot*darpcCallStride)
			spec.PutDaRPCCall(t.mr.Bytes()[off:off+spec.DaRPCCallLen], cid, n) // n in range: checked by Open
			q.calls[slot] = append(q.calls[slot][:0], ids[taken:taken+n]...)
			for j, id := range ids[taken : taken+n] {
				t.loc[id] = darpcLoc{qp: qi, slot: slot, idx: j, inflight: true}
			}
			k := len(q.wrs)
			q.sges[k] = verbs.SGE{Addr: t.mr.Addr() + off, Length: spec.DaRPCCallLen, LKey: t.mr.LKey()}
			q.wrs = append(q.wrs, verbs.SendWR{ID: darpcSendBit | uint64(qi), Opcode: verbs.OpSend, Flags: verbs.Signaled,
				SG: q.sges[k : k+1]})
			q.ids = append(q.ids, cid)
			taken += n
		}
		if len(q.wrs) == 0 {
			continue
		}
		posted, err := q.qp.PostSend(q.wrs)
		if err == nil {
			continue
		}
		// The unposted messages go back (newest first). A send queue
		// still full of calls whose acknowledgements were lost (their
		// answers came) only waits; any other refusal means the QP is in
		// ERR: the transport is broken, and what was posted goes back to
		// the engine with an error (failQP).
		for m := len(q.ids) - 1; m >= posted; m-- {
			slot := int(q.ids[m] % uint64(len(q.calls)))
			for _, id := range q.calls[slot] {
				t.loc[id].inflight = false
			}
			taken -= len(q.calls[slot])
			q.calls[slot] = q.calls[slot][:0]
			q.ring.Unsend(q.ids[m])
		}
		t.live += taken
		if errors.Is(err, verbs.ErrQueueFull) {
			return taken, nil
		}
		t.failQP(qi)
		return taken, fmt.Errorf("client: darpc post: %w", err)
	}
	t.live += taken
	return taken, nil
}

// Poll moves answers into res.
func (t *darpcTransport) Poll(now time.Duration, res []result) int {
	if len(t.out) == 0 {
		t.pollCQ()
	}
	k := copy(res, t.out)
	t.out = t.out[:copy(t.out, t.out[k:])]
	return k
}

// pollCQ handles one poll of completions into t.out.
func (t *darpcTransport) pollCQ() {
	// Room for every result one poll can produce: each answer carries up
	// to min(window, MaxCalls) requests, and t.out holds capacity.
	n, err := t.cq.Poll(t.wcs)
	if err != nil || n == 0 {
		return
	}
	buf := t.mr.Bytes()
	for i := range t.wcs[:n] {
		wc := &t.wcs[i]
		if wc.ID&darpcSendBit != 0 {
			if qi := int(wc.ID &^ darpcSendBit); wc.Status != verbs.WCSuccess && qi < len(t.qps) {
				t.failQP(qi)
			}
			continue
		}
		qi, b := int(wc.ID>>16), int(wc.ID&0xffff)
		if qi >= len(t.qps) || b >= t.window {
			t.st.malformed.Add(1)
			continue
		}
		q := t.qps[qi]
		if wc.Status != verbs.WCSuccess {
			t.failQP(qi)
			continue
		}
		off := q.base + uint64(t.window*darpcCallStride+b*darpcRecvStride)
		var m spec.DaRPCMsg
		if wc.ByteLen <= darpcRecvStride {
			m, err = spec.DecodeDaRPCAnswer(buf[off : off+uint64(wc.ByteLen)])
		} else {
			err = spec.ErrBadLength
		}
		t.addRecv(qi, b) // decoded: the buffer goes back
		if err != nil {
			t.st.malformed.Add(1)
			continue
		}
		slot, cnt, ok := q.ring.Answer(m.ID, m.Count)
		if !ok {
			t.st.stale.Add(1) // no message in flight under that call ID and count
			continue
		}
		for j, id := range q.calls[slot][:cnt] {
			if id < 0 {
				continue // cancelled: its value is skipped
			}
			t.loc[id].inflight = false
			t.live--
			if m.Kind == spec.DaRPCValues {
				t.out = append(t.out, result{ID: id, Value: m.First + uint64(j)})
			} else {
				t.out = append(t.out, result{ID: id, Err: errDaRPCRefused})
			}
		}
		q.calls[slot] = q.calls[slot][:0]
	}
	for qi, q := range t.qps {
		if len(q.rwrs) == 0 {
			continue
		}
		if !q.dead {
			if _, err := q.qp.PostRecv(q.rwrs); err != nil {
				t.failQP(qi)
			}
		}
		q.rwrs = q.rwrs[:0]
	}
}

// failQP takes QP qi out of service: every request in flight on the
// transport goes back to the engine with an error (the transport is
// broken, and the engine reconnects); answers that still come for them
// are skipped.
func (t *darpcTransport) failQP(qi int) {
	t.qps[qi].dead = true
	if t.broken {
		return
	}
	t.broken = true
	for id := range t.loc {
		l := &t.loc[id]
		if !l.inflight {
			continue
		}
		t.qps[l.qp].calls[l.slot][l.idx] = -1
		l.inflight = false
		t.live--
		t.out = append(t.out, result{ID: id, Err: errDaRPCBroken})
	}
}

// Expire resends nothing (RC does): it breaks the transport when a QP's
// oldest message waited spec.DaRPCStall for its answer.
func (t *darpcTransport) Expire(now time.Duration) int {
	for qi, q := range t.qps {
		if q.dead || q.ring == nil {
			continue
		}
		if sent, ok := q.ring.Oldest(); ok && now-sent > t.stall {
			t.failQP(qi)
		}
	}
	return 0
}

func (t *darpcTransport) NextDeadline() (time.Duration, bool) {
	var next time.Duration
	found := false
	for _, q := range t.qps {
		if q.dead || q.ring == nil {
			continue
		}
		if sent, ok := q.ring.Oldest(); ok && (!found || sent+t.stall < next) {
			next, found = sent+t.stall, true
		}
	}
	return next, found
}

// Cancel drops request id: an answer that still comes skips its value.
func (t *darpcTransport) Cancel(id int) {
	if id < 0 || id >= len(t.loc) || !t.loc[id].inflight {
		return
	}
	l := &t.loc[id]
	t.qps[l.qp].calls[l.slot][l.idx] = -1
	l.inflight = false
	t.live--
}

func (t *darpcTransport) Close() error {
	for _, q := range t.qps {
		closeAll(q.qp)
	}
	t.qps = nil
	closeAll(t.mr, t.cq)
	t.broken = true
	return nil
}
