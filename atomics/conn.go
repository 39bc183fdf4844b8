package atomics

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/seqd/seqd/spec"
	"github.com/seqd/seqd/verbs"
)

// Conn is the client side of the atomics mode: nqps RC QPs, each with up
// to window FETCH_AND_ADDs in flight, posted as one chain per QP (the
// postlist). One goroutine owns a Conn.
type Conn struct {
	cq     verbs.CQ
	resMR  verbs.MR // one 8-byte result per (qp, slot)
	qps    []*connQP
	window int
	free   int
	broken bool
	wcs    []verbs.WC
	addr   uint64
	rkey   uint32
	be     bool

	Failed uint64
}

type connQP struct {
	qp   verbs.QP
	busy []bool
	wrs  []verbs.SendWR
	sges []verbs.SGE
	nwr  int
}

// Result is one completed request; Err is set when the QP failed (the
// server stopped or fenced): the request may be retried elsewhere.
type Result struct {
	ID    int
	Value uint64
	Err   error
}

// RC timing: a dead server is detected in about RetryCnt × 4 ms.
const (
	rcTimeout  = 10 // 4.096 µs × 2^10 ≈ 4 ms
	rcRetryCnt = 7
)

// NewConn creates nqps RC QPs in RESET with window outstanding atomics
// each.
func NewConn(pd verbs.PD, dev verbs.Device, nqps, window int) (c *Conn, err error) {
	if nqps < 1 || window < 1 || window > 1024 {
		return nil, fmt.Errorf("%w: %d QPs, window %d", ErrArgument, nqps, window)
	}
	c = &Conn{window: window, be: dev.Attr().AtomicBigEndian}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	if c.cq, err = dev.CreateCQ(nqps * (window + 1)); err != nil {
		return nil, fmt.Errorf("atomics: client CQ: %w", err)
	}
	if c.resMR, err = pd.RegMR(nqps*window*spec.CounterLen, verbs.AccessLocalWrite); err != nil {
		return nil, fmt.Errorf("atomics: client result buffers: %w", err)
	}
	for i := range nqps {
		q := &connQP{busy: make([]bool, window), wrs: make([]verbs.SendWR, window), sges: make([]verbs.SGE, window)}
		c.qps = append(c.qps, q)
		if q.qp, err = pd.CreateQP(verbs.QPInitAttr{Type: verbs.RC, SendCQ: c.cq, RecvCQ: c.cq,
			Cap: verbs.QPCap{MaxSendWR: window, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
			return nil, fmt.Errorf("atomics: client QP %d: %w", i, err)
		}
	}
	c.wcs = make([]verbs.WC, 64)
	return c, nil
}

// QPs describes the client's QPs for Server.Admit.
func (c *Conn) QPs() []Endpoint {
	out := make([]Endpoint, len(c.qps))
	for i, q := range c.qps {
		out[i] = Endpoint{q.qp.Address(), q.qp.QPN()}
	}
	return out
}

// Attach connects the QPs to the server's.
func (c *Conn) Attach(g Grant) error {
	if len(g.Server) != len(c.qps) || len(g.PSNs) != len(c.qps) {
		return fmt.Errorf("%w: grant for %d QPs with %d PSNs, have %d QPs", ErrArgument, len(g.Server), len(g.PSNs), len(c.qps))
	}
	for i, q := range c.qps {
		if err := verbs.Connect(q.qp, verbs.ConnectAttr{Remote: g.Server[i].Addr, RemoteQPN: g.Server[i].QPN,
			SQPSN: g.PSNs[i] & verbs.PSNMask, Timeout: rcTimeout, RetryCnt: rcRetryCnt}); err != nil {
			return fmt.Errorf("atomics: client QP %d connect: %w", i, err)
		}
	}
	c.addr, c.rkey = g.Addr, g.RKey
	c.free = len(c.qps) * c.window
	return nil
}

// Free is how many more requests Send can take now.
func (c *Conn) Free() int {
	if c.broken {
		return 0
	}
	return c.free
}

// Outstanding is how many requests wait for their completion.
func (c *Conn) Outstanding() int { return len(c.qps)*c.window - c.free }

// Broken reports whether a QP failed: the Conn takes no more requests.
func (c *Conn) Broken() bool { return c.broken }

// CQ is where completions arrive, for the engine to wait on.
func (c *Conn) CQ() verbs.CQ { return c.cq }

// Send posts up to len(ids) FETCH_AND_ADDs, one chain per QP, and stores
// their IDs in ids.
func (c *Conn) Send(now time.Duration, ids []int) (int, error) {
	if c.broken {
		return 0, nil
	}
	n := 0
	var ferr error
	for qi, q := range c.qps {
		q.nwr = 0
		for slot := range q.busy {
			if n == len(ids) {
				break
			}
			if q.busy[slot] {
				continue
			}
			id := qi*c.window + slot
			q.sges[q.nwr] = verbs.SGE{Addr: c.resMR.Addr() + uint64(id*spec.CounterLen), Length: spec.CounterLen, LKey: c.resMR.LKey()}
			q.wrs[q.nwr] = verbs.SendWR{ID: uint64(id), Opcode: verbs.OpAtomicFetchAdd, Flags: verbs.Signaled,
				SG: q.sges[q.nwr : q.nwr+1], RemoteAddr: c.addr, RKey: c.rkey, CompareAdd: spec.FetchAddDelta}
			q.nwr++
			q.busy[slot] = true
			c.free--
			ids[n] = id
			n++
		}
		if q.nwr == 0 {
			continue
		}
		posted, err := q.qp.PostSend(q.wrs[:q.nwr])
		if err != nil {
			// Unposted ones go back; the QP is probably in ERR.
			for _, wr := range q.wrs[posted:q.nwr] {
				q.busy[int(wr.ID)%c.window] = false
				c.free++
			}
			n -= q.nwr - posted
			c.broken = true
			if ferr == nil {
				ferr = fmt.Errorf("atomics: post: %w", err)
			}
		}
	}
	return n, ferr
}

// Poll takes completed requests into res.
func (c *Conn) Poll(now time.Duration, res []Result) int {
	n, err := c.cq.Poll(c.wcs[:min(len(res), len(c.wcs))])
	if err != nil {
		return 0
	}
	buf := c.resMR.Bytes()
	k := 0
	for _, wc := range c.wcs[:n] {
		id := int(wc.ID)
		qi, slot := id/c.window, id%c.window
		if qi >= len(c.qps) || !c.qps[qi].busy[slot] {
			continue
		}
		c.qps[qi].busy[slot] = false
		c.free++
		if wc.Status != verbs.WCSuccess {
			c.broken = true
			c.Failed++
			res[k] = Result{ID: id, Err: wc.Err()}
		} else {
			v := binary.LittleEndian.Uint64(buf[id*spec.CounterLen:])
			if c.be {
				v = binary.BigEndian.Uint64(buf[id*spec.CounterLen:])
			}
			res[k] = Result{ID: id, Value: v}
		}
		k++
	}
	return k
}

// Close releases the Conn's resources (not the PD).
func (c *Conn) Close() error {
	for _, q := range c.qps {
		if q.qp != nil {
			q.qp.Close()
		}
	}
	c.qps = nil
	if c.resMR != nil {
		c.resMR.Close()
	}
	if c.cq != nil {
		c.cq.Close()
	}
	return nil
}
