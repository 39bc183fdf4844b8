package herd

import (
	"fmt"
	"time"

	"github.com/seqd/seqd/spec"
	"github.com/seqd/seqd/verbs"
)

// Conn is the client side of the HERD mode: for each client QP a UC QP
// that writes requests into the QP's block of slots and a UD QP whose
// RECVs take the answers. One goroutine owns a Conn (the client engine);
// its methods are not safe for concurrent use.
//
// A request is identified by an ID (qp*window + position). RECVs are
// posted before any request is written, and re-posted as answers are
// taken.
type Conn struct {
	pd     verbs.PD
	recvCQ verbs.CQ
	sendCQ verbs.CQ
	reqMR  verbs.MR // one SlotLen buffer per (qp, position)
	recvMR verbs.MR
	qps    []*connQP
	window int
	free   int
	recvN  int // RECVs per UD QP

	wcs     []verbs.WC
	swcs    []verbs.WC
	recvWRs []verbs.RecvWR
	recvSGE []verbs.SGE
	timeout time.Duration

	answerFrom verbs.Senders // the server's response QPs (Grant.AnswerFrom)

	// Forged counts answers dropped because they came from a QP or
	// address other than the server's response QPs.
	Retransmits, Stale, Malformed, Forged uint64
}

type connQP struct {
	uc, ud verbs.QP
	addr   uint64
	rkey   uint32
	pos    []position
	wrs    []verbs.SendWR
	sges   []verbs.SGE
	nwr    int
	posted uint64
	done   uint64
}

type position struct {
	seq      spec.Seq
	busy     bool
	deadline time.Duration
}

// Result is one answered request.
type Result struct {
	ID    int
	Value uint64
}

const (
	connSignalEvery = 16
	recvSlot        = verbs.GRHLen + 64
)

// NewConn creates the client's QPs in RESET: nqps pairs of a UC write QP
// and a UD receive QP, for up to window requests per pair. timeout is how
// long a request waits for its answer before it is written again under a
// fresh sequence number.
func NewConn(pd verbs.PD, dev verbs.Device, nqps, window int, timeout time.Duration) (c *Conn, err error) {
	if nqps < 1 || window < 1 || window > spec.HERDMaxWindow {
		return nil, fmt.Errorf("%w: %d QPs, window %d", ErrArgument, nqps, window)
	}
	c = &Conn{pd: pd, window: window, timeout: timeout, recvN: 2*window + 16}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	if c.recvCQ, err = dev.CreateCQ(nqps * c.recvN); err != nil {
		return nil, fmt.Errorf("herd: client receive CQ: %w", err)
	}
	if c.sendCQ, err = dev.CreateCQ(nqps * (2*window/connSignalEvery + 4)); err != nil {
		return nil, fmt.Errorf("herd: client send CQ: %w", err)
	}
	if c.reqMR, err = pd.RegMR(nqps*window*spec.SlotLen, verbs.AccessLocalWrite); err != nil {
		return nil, fmt.Errorf("herd: client request buffers: %w", err)
	}
	if c.recvMR, err = pd.RegMR(nqps*c.recvN*recvSlot, verbs.AccessLocalWrite); err != nil {
		return nil, fmt.Errorf("herd: client receive buffers: %w", err)
	}
	for i := range nqps {
		q := &connQP{pos: make([]position, window), wrs: make([]verbs.SendWR, window), sges: make([]verbs.SGE, window)}
		c.qps = append(c.qps, q)
		if q.uc, err = pd.CreateQP(verbs.QPInitAttr{Type: verbs.UC, SendCQ: c.sendCQ, RecvCQ: c.sendCQ,
			Cap: verbs.QPCap{MaxSendWR: 2*window + 2*connSignalEvery, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: spec.SlotLen}}); err != nil {
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

// QPs describes the client's QPs for Server.Admit.
func (c *Conn) QPs() []ClientQP {
	out := make([]ClientQP, len(c.qps))
	for i, q := range c.qps {
		out[i] = ClientQP{Write: Endpoint{q.uc.Address(), q.uc.QPN()}, Recv: Endpoint{q.ud.Address(), q.ud.QPN()}}
	}
	return out
}

// Attach brings the QPs up for grant g: RECVs first, then the UC QPs
// connected to the server's. The window becomes min(window, g.Window).
func (c *Conn) Attach(g Grant) error {
	if len(g.QPs) != len(c.qps) || g.Window < 1 {
		return fmt.Errorf("%w: grant for %d QPs (have %d), window %d", ErrArgument, len(g.QPs), len(c.qps), g.Window)
	}
	c.window = min(c.window, g.Window)
	c.answerFrom = g.AnswerFrom
	for i, q := range c.qps {
		if err := verbs.BringUpUD(q.ud, g.QKey, 0); err != nil {
			return fmt.Errorf("herd: client UD QP %d bring-up: %w", i, err)
		}
		for s := range c.recvN {
			c.setRecv(s, i, s)
		}
		if _, err := q.ud.PostRecv(c.recvWRs[:c.recvN]); err != nil {
			return fmt.Errorf("herd: client UD QP %d: post receives: %w", i, err)
		}
		gq := g.QPs[i]
		if err := verbs.Connect(q.uc, verbs.ConnectAttr{Remote: gq.Server.Addr, RemoteQPN: gq.Server.QPN}); err != nil {
			return fmt.Errorf("herd: client UC QP %d connect: %w", i, err)
		}
		q.addr, q.rkey = gq.Addr, gq.RKey
		q.pos = q.pos[:c.window]
	}
	c.free = len(c.qps) * c.window
	return nil
}

func (c *Conn) setRecv(i, qi, s int) {
	slot := qi*c.recvN + s
	c.recvWRs[i].ID = uint64(slot)
	c.recvSGE[i] = verbs.SGE{Addr: c.recvMR.Addr() + uint64(slot)*recvSlot, Length: recvSlot, LKey: c.recvMR.LKey()}
}

// Free is how many more requests Send can take now.
func (c *Conn) Free() int { return c.free }

// Outstanding is how many requests wait for an answer.
func (c *Conn) Outstanding() int { return len(c.qps)*c.window - c.free }

// CQ is the completion queue answers arrive on, for the engine to wait on.
func (c *Conn) CQ() verbs.CQ { return c.recvCQ }

// Send writes up to len(ids) new requests, spreading them over the QPs,
// one chain per QP; it stores the ID of each in ids and returns how many
// it wrote.
func (c *Conn) Send(now time.Duration, ids []int) (int, error) {
	n := 0
	var ferr error
	for qi, q := range c.qps {
		for pos := range q.pos {
			if n == len(ids) {
				break
			}
			p := &q.pos[pos]
			if p.busy {
				continue
			}
			p.busy = true
			c.free--
			ids[n] = qi*c.window + pos
			n++
			c.queueWrite(now, qi, pos)
		}
		if err := c.flush(q); err != nil && ferr == nil {
			ferr = err
		}
	}
	return n, ferr
}

// queueWrite adds the WRITE of position pos under a fresh sequence number
// to its QP's chain.
func (c *Conn) queueWrite(now time.Duration, qi, pos int) {
	q := c.qps[qi]
	p := &q.pos[pos]
	p.seq = p.seq.Next()
	p.deadline = now + c.timeout
	idx := qi*cap(q.pos) + pos
	buf := c.reqMR.Bytes()[idx*spec.SlotLen : (idx+1)*spec.SlotLen]
	spec.PutSlot(buf, p.seq) // seq from Next is valid
	q.sges[q.nwr] = verbs.SGE{Addr: c.reqMR.Addr() + uint64(idx*spec.SlotLen), Length: spec.SlotLen, LKey: c.reqMR.LKey()}
	seq := q.posted + uint64(q.nwr)
	wr := &q.wrs[q.nwr]
	*wr = verbs.SendWR{ID: seq<<8 | uint64(qi), Opcode: verbs.OpRDMAWrite, Flags: verbs.Inline,
		SG: q.sges[q.nwr : q.nwr+1], RemoteAddr: q.addr + uint64(pos*spec.SlotLen), RKey: q.rkey}
	if seq%connSignalEvery == connSignalEvery-1 {
		wr.Flags |= verbs.Signaled
	}
	q.nwr++
}

// flush posts q's pending WRITEs as one chain (one doorbell). WRITEs that
// could not be posted are retried when they expire.
func (c *Conn) flush(q *connQP) error {
	if q.nwr == 0 {
		return nil
	}
	for q.posted-q.done+uint64(q.nwr) > uint64(2*c.window+connSignalEvery) {
		if c.reapSends() == 0 {
			break
		}
	}
	n, err := q.uc.PostSend(q.wrs[:q.nwr])
	q.posted += uint64(n)
	q.nwr = 0
	if err != nil {
		return fmt.Errorf("herd: write requests: %w", err)
	}
	return nil
}

// Poll takes answered requests into res and returns how many.
func (c *Conn) Poll(now time.Duration, res []Result) int {
	c.reapSends()
	lim := min(len(res), len(c.wcs))
	n, err := c.recvCQ.Poll(c.wcs[:lim])
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
			c.recvWRs[nr].ID = wc.ID
			c.recvSGE[nr] = verbs.SGE{Addr: c.recvMR.Addr() + uint64(slot)*recvSlot, Length: recvSlot, LKey: c.recvMR.LKey()}
			nr++
			if wc.Status != verbs.WCSuccess || wc.Flags&verbs.WCWithImm == 0 || wc.ByteLen < verbs.GRHLen {
				if wc.Status != verbs.WCWRFlushErr {
					c.Malformed++
				}
				continue
			}
			if !c.answerFrom.Match(wc) {
				c.Forged++
				continue
			}
			off := slot*recvSlot + verbs.GRHLen
			pos, seq, v, err := spec.DecodeHERDAnswer(spec.HERDImm(wc.Imm), buf[off:off+int(wc.ByteLen)-verbs.GRHLen])
			if err != nil || pos >= len(q.pos) {
				c.Malformed++
				continue
			}
			p := &q.pos[pos]
			if !p.busy || p.seq != seq {
				c.Stale++ // an answer to an earlier WRITE, or a duplicate
				continue
			}
			p.busy = false
			c.free++
			res[k] = Result{ID: qi*c.window + pos, Value: v}
			k++
		}
		if nr > 0 {
			q.ud.PostRecv(c.recvWRs[:nr]) // a refused RECV only shrinks the queue; answers then time out
		}
	}
	return k
}

// Expire writes every request that waited longer than the timeout again,
// under a fresh sequence number, and returns how many it rewrote.
func (c *Conn) Expire(now time.Duration) int {
	n := 0
	for qi, q := range c.qps {
		for pos := range q.pos {
			if p := &q.pos[pos]; p.busy && now >= p.deadline {
				c.queueWrite(now, qi, pos)
				n++
			}
		}
		c.flush(q)
	}
	c.Retransmits += uint64(n)
	return n
}

// NextDeadline is when the earliest outstanding request expires.
func (c *Conn) NextDeadline() (time.Duration, bool) {
	var d time.Duration
	ok := false
	for _, q := range c.qps {
		for _, p := range q.pos {
			if p.busy && (!ok || p.deadline < d) {
				d, ok = p.deadline, true
			}
		}
	}
	return d, ok
}

// Cancel gives up on request id: any answer to it is stale from now on.
func (c *Conn) Cancel(id int) {
	qi, pos := id/c.window, id%c.window
	if qi < 0 || qi >= len(c.qps) || pos >= len(c.qps[qi].pos) {
		return
	}
	p := &c.qps[qi].pos[pos]
	if p.busy {
		p.busy = false
		p.seq = p.seq.Next() // the answer to the current seq no longer matches
		c.free++
	}
}

func (c *Conn) reapSends() int {
	n, err := c.sendCQ.Poll(c.swcs)
	if err != nil {
		return 0
	}
	for _, wc := range c.swcs[:n] {
		if qi := int(wc.ID & 0xff); qi < len(c.qps) {
			if seq := wc.ID >> 8; seq+1 > c.qps[qi].done {
				c.qps[qi].done = seq + 1
			}
		}
	}
	return n
}

// Close releases the Conn's verbs resources (not the PD).
func (c *Conn) Close() error {
	for _, q := range c.qps {
		if q.uc != nil {
			q.uc.Close()
		}
		if q.ud != nil {
			q.ud.Close()
		}
	}
	c.qps = nil
	for _, r := range []verbs.MR{c.reqMR, c.recvMR} {
		if r != nil {
			r.Close()
		}
	}
	for _, q := range []verbs.CQ{c.recvCQ, c.sendCQ} {
		if q != nil {
			q.Close()
		}
	}
	return nil
}
