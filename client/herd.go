package client

import (
	"context"
	"fmt"
	"time"

	"github.com/seqd/seqd/admin/handshake"
	"github.com/seqd/seqd/spec"
	"github.com/seqd/seqd/verbs"
)

func init() { transports[spec.ModeHERD] = dialHERD }

// herdConn is the HERD data path: for each client QP a UC QP that
// writes requests into the QP's block of server slots and a UD QP whose
// RECVs take the answers. Request ID id is position id%window of QP
// id/window; a WRITE carries a fresh sequence number, and an answer is
// taken only for the sequence number its position waits for.
//
// RECVs are posted before any request is written, and re-posted as
// answers are taken.
//
// The server takes a position's seq only within spec.HERDMaxStep after
// the last one it answered there. Each position keeps acked, the newest
// seq the server answered (from any answer that passed the source and
// Q_Key checks, stale ones included): the server's last is at least
// that, so a seq within the step of acked is never refused as too far
// ahead. A position that would have to write beyond it (more than
// HERDMaxStep WRITEs unanswered) breaks the connection instead, and the
// client reconnects to a fresh session. An answer to a seq after the
// position's own (a stray WRITE of the position, answered) moves the
// position past it: its next WRITE is then one the server takes.
type herdConn struct {
	st     *stats
	recvCQ verbs.CQ
	sendCQ verbs.CQ
	reqMR  verbs.MR // one SlotLen buffer per (qp, position)
	recvMR verbs.MR
	qps    []*herdQP
	window int
	free   int
	recvN  int  // RECVs per UD QP
	broken bool // a position ran more than spec.HERDMaxStep WRITEs ahead of its last answer

	wcs     []verbs.WC
	swcs    []verbs.WC
	recvWRs []verbs.RecvWR
	recvSGE []verbs.SGE
	timeout time.Duration

	answerFrom verbs.Senders // the server's response QPs
}

type herdQP struct {
	uc, ud verbs.QP
	addr   uint64
	rkey   uint32
	seq    []spec.Seq // per position: the sequence number of its request
	acked  []spec.Seq // per position: the newest seq the server answered, 0 for none
	due    []timer    // per position: its request's timeout
	sendChain
}

const herdSignalEvery = 16

// dialHERD admits the client in herd mode with fresh QPs.
func dialHERD(ctx context.Context, env *transportEnv) (transport, error) {
	window := min(env.window, spec.HERDMaxWindow)
	h, err := newHERD(env.pd, env.dev, env.st, env.qps, window, env.retransmit)
	if err != nil {
		return nil, fmt.Errorf("client: herd QPs: %w", err)
	}
	qps, conn := h.endpoints()
	return admit(ctx, env, handshake.Admission{Window: window, QPs: qps, ConnQPs: conn}, spec.ModeHERD, h)
}

// newHERD creates the QPs in RESET: nqps pairs of a UC write QP and a UD
// receive QP, for up to window requests per pair. timeout is how long a
// request waits for its answer before it is written again under a fresh
// sequence number.
func newHERD(pd verbs.PD, dev verbs.Device, st *stats, nqps, window int, timeout time.Duration) (c *herdConn, err error) {
	if nqps < 1 || window < 1 || window > spec.HERDMaxWindow {
		return nil, fmt.Errorf("%w: %d QPs, window %d", ErrConfig, nqps, window)
	}
	c = &herdConn{st: st, window: window, timeout: timeout, recvN: 2*window + 16}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	if c.recvCQ, err = dev.CreateCQ(nqps * c.recvN); err != nil {
		return nil, fmt.Errorf("herd: client receive CQ: %w", err)
	}
	// Room for every WR the send queues hold, not only the signaled ones:
	// a QP in ERR flushes them all, unsignaled too (ibv_poll_cq(3)).
	if c.sendCQ, err = dev.CreateCQ(nqps * (2*window + 2*herdSignalEvery + 4)); err != nil {
		return nil, fmt.Errorf("herd: client send CQ: %w", err)
	}
	if c.reqMR, err = pd.RegMR(nqps*window*spec.SlotLen, verbs.AccessLocalWrite); err != nil {
		return nil, fmt.Errorf("herd: client request buffers: %w", err)
	}
	if c.recvMR, err = pd.RegMR(nqps*c.recvN*recvSlot, verbs.AccessLocalWrite); err != nil {
		return nil, fmt.Errorf("herd: client receive buffers: %w", err)
	}
	for i := range nqps {
		q := &herdQP{seq: make([]spec.Seq, window), acked: make([]spec.Seq, window), due: make([]timer, window), sendChain: newSendChain(window)}
		c.qps = append(c.qps, q)
		if q.uc, err = pd.CreateQP(verbs.QPInitAttr{Type: verbs.UC, SendCQ: c.sendCQ, RecvCQ: c.sendCQ,
			Cap: verbs.QPCap{MaxSendWR: 2*window + 2*herdSignalEvery, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: spec.SlotLen}}); err != nil {
			return nil, fmt.Errorf("herd: client UC QP %d: %w", i, err)
		}
		if q.ud, err = pd.CreateQP(verbs.QPInitAttr{Type: verbs.UD, SendCQ: c.sendCQ, RecvCQ: c.recvCQ,
			Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: c.recvN, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
			return nil, fmt.Errorf("herd: client UD QP %d: %w", i, err)
		}
	}
	c.wcs = make([]verbs.WC, 64)
	c.swcs = make([]verbs.WC, 64)
	c.recvWRs = make([]verbs.RecvWR, max(c.recvN, len(c.wcs)))
	c.recvSGE = make([]verbs.SGE, len(c.recvWRs))
	for i := range c.recvWRs {
		c.recvWRs[i].SG = c.recvSGE[i : i+1]
	}
	return c, nil
}

// endpoints names the QPs for admission: the UD QPs answers go to, and
// the UC QPs that write the requests (handshake.Admission's QPs and
// ConnQPs).
func (c *herdConn) endpoints() (recv, write []handshake.Endpoint) {
	for _, q := range c.qps {
		recv = append(recv, endpointOf(q.ud))
		write = append(write, endpointOf(q.uc))
	}
	return recv, write
}

// attach brings the QPs up for grant g: RECVs first, then the UC QPs
// connected to the server's. The window becomes min(window, g.Window).
func (c *herdConn) attach(g handshake.Grant) error {
	c.window = min(c.window, g.Window)
	c.answerFrom = sendersOf(g.AnswerQPs)
	for i, q := range c.qps {
		if err := verbs.BringUpUD(q.ud, g.AnswerQKey, 0); err != nil {
			return fmt.Errorf("herd: client UD QP %d bring-up: %w", i, err)
		}
		for s := range c.recvN {
			c.setRecv(s, i, s)
		}
		if _, err := q.ud.PostRecv(c.recvWRs[:c.recvN]); err != nil {
			return fmt.Errorf("herd: client UD QP %d: post receives: %w", i, err)
		}
		srv := g.ServerConnQPs[i]
		if err := verbs.Connect(q.uc, verbs.ConnectAttr{Remote: srv.Addr, RemoteQPN: srv.QPN}); err != nil {
			return fmt.Errorf("herd: client UC QP %d connect: %w", i, err)
		}
		q.addr, q.rkey = g.RemoteAddr[i], g.RKey[i]
		q.seq, q.acked, q.due = q.seq[:c.window], q.acked[:c.window], q.due[:c.window]
	}
	c.free = len(c.qps) * c.window
	return nil
}

func (c *herdConn) setRecv(i, qi, s int) {
	slot := qi*c.recvN + s
	c.recvWRs[i].ID = uint64(slot)
	c.recvSGE[i] = verbs.SGE{Addr: c.recvMR.Addr() + uint64(slot)*recvSlot, Length: recvSlot, LKey: c.recvMR.LKey()}
}

func (c *herdConn) Free() int { return c.free }

func (c *herdConn) Outstanding() int { return len(c.qps)*c.window - c.free }

func (c *herdConn) CQ() verbs.CQ { return c.recvCQ }

func (c *herdConn) Broken() bool { return c.broken }

// Send writes the requests ids, one chain per QP.
func (c *herdConn) Send(now time.Duration, ids []int) (int, error) {
	n := 0
	for _, id := range ids {
		qi, pos := id/c.window, id%c.window
		p := &c.qps[qi].due[pos]
		if p.busy {
			break // not the engine's: never happens
		}
		p.busy = true
		c.free--
		c.queueWrite(now, qi, pos)
		n++
	}
	var ferr error
	for _, q := range c.qps {
		if err := c.flush(q); err != nil && ferr == nil {
			ferr = err
		}
	}
	return n, ferr
}

// queueWrite adds the WRITE of position pos under a fresh sequence number
// to its QP's chain, unless that seq is more than spec.HERDMaxStep after
// the position's last answer: the server would drop it, so the
// connection breaks instead (the engine reconnects and sends the request
// again).
func (c *herdConn) queueWrite(now time.Duration, qi, pos int) {
	q := c.qps[qi]
	q.due[pos].deadline = now + c.timeout
	next := q.seq[pos].Next()
	if spec.HERDClassify(q.acked[pos], next) != spec.StepNew {
		c.broken = true
		return
	}
	q.seq[pos] = next
	idx := qi*cap(q.seq) + pos
	buf := c.reqMR.Bytes()[idx*spec.SlotLen : (idx+1)*spec.SlotLen]
	spec.PutSlot(buf, q.seq[pos]) // seq from Next is valid
	q.add(qi, herdSignalEvery, verbs.SendWR{Opcode: verbs.OpRDMAWrite, Flags: verbs.Inline, RemoteAddr: q.addr + uint64(pos*spec.SlotLen), RKey: q.rkey},
		verbs.SGE{Addr: c.reqMR.Addr() + uint64(idx*spec.SlotLen), Length: spec.SlotLen, LKey: c.reqMR.LKey()})
}

// flush posts q's pending WRITEs as one chain (one doorbell). WRITEs that
// could not be posted are retried when they expire.
func (c *herdConn) flush(q *herdQP) error {
	if err := q.post(q.uc, uint64(2*c.window+herdSignalEvery), c.reapSends, c.st); err != nil {
		return fmt.Errorf("herd: write requests: %w", err)
	}
	return nil
}

func (c *herdConn) Poll(now time.Duration, res []result) int {
	c.reapSends()
	n, err := c.recvCQ.Poll(c.wcs[:min(len(res), len(c.wcs))])
	if err != nil || n == 0 {
		return 0
	}
	buf := c.recvMR.Bytes()
	k := 0
	for qi, q := range c.qps {
		nr := 0
		for i := range c.wcs[:n] {
			wc := &c.wcs[i]
			slot := int(wc.ID)
			if slot/c.recvN != qi {
				continue
			}
			c.setRecv(nr, qi, slot%c.recvN)
			nr++
			if wc.Status != verbs.WCSuccess || wc.Flags&verbs.WCWithImm == 0 || wc.ByteLen < verbs.GRHLen {
				if wc.Status != verbs.WCWRFlushErr {
					c.st.malformed.Add(1)
				}
				continue
			}
			if !c.answerFrom.Match(wc) {
				c.st.forged.Add(1)
				continue
			}
			off := slot*recvSlot + verbs.GRHLen
			pos, seq, v, err := spec.DecodeHERDAnswer(spec.HERDImm(wc.Imm), buf[off:off+int(wc.ByteLen)-verbs.GRHLen])
			if err != nil || pos >= len(q.seq) {
				c.st.malformed.Add(1)
				continue
			}
			if q.acked[pos].Before(seq) {
				q.acked[pos] = seq // the server's last seq of pos is at least seq
			}
			p := &q.due[pos]
			if q.seq[pos].Before(seq) && spec.SeqDistance(q.seq[pos], seq) <= spec.HERDMaxStep {
				// An answer to a seq this client never wrote: a stray WRITE
				// of pos, which the server took. Move past it (and past
				// seq itself, whose answer may come again) and rewrite the
				// request now: the server takes seq+2.
				c.st.stale.Add(1)
				q.seq[pos] = seq.Next()
				if p.busy {
					p.deadline = now
				}
				continue
			}
			if !p.busy || q.seq[pos] != seq {
				c.st.stale.Add(1) // an answer to an earlier WRITE, or a duplicate
				continue
			}
			p.busy = false
			c.free++
			res[k] = result{ID: qi*c.window + pos, Value: v}
			k++
		}
		if nr > 0 {
			q.ud.PostRecv(c.recvWRs[:nr]) // a refused RECV only shrinks the queue; answers then time out
		}
	}
	return k
}

// Expire writes every request that waited longer than the timeout again,
// under a fresh sequence number.
func (c *herdConn) Expire(now time.Duration) int {
	return expire(c.qps, now, func(qi, pos int) { c.queueWrite(now, qi, pos) }, c.flush)
}

func (c *herdConn) NextDeadline() (time.Duration, bool) { return nextDeadline(c.qps) }

func (q *herdQP) timers() []timer { return q.due }

// Cancel gives up on request id: any answer to it is stale from now on.
func (c *herdConn) Cancel(id int) {
	qi, pos := id/c.window, id%c.window
	if qi < 0 || qi >= len(c.qps) || pos >= len(c.qps[qi].seq) {
		return
	}
	q := c.qps[qi]
	if p := &q.due[pos]; p.busy {
		p.busy = false
		q.seq[pos] = q.seq[pos].Next() // the answer to the current seq no longer matches
		c.free++
	}
}

func (c *herdConn) reapSends() int { return reapSends(c.sendCQ, c.swcs, c.qps) }

// Close releases the verbs resources (not the PD).
func (c *herdConn) Close() error {
	for _, q := range c.qps {
		closeAll(q.uc, q.ud)
	}
	c.qps = nil
	closeAll(c.reqMR, c.recvMR, c.recvCQ, c.sendCQ)
	return nil
}
