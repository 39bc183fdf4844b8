package client

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/seqd/seqd/admin/handshake"
	"github.com/seqd/seqd/spec"
	"github.com/seqd/seqd/verbs"
)

func init() { transports[spec.ModeAtomics] = dialAtomics }

// atomicsConn is the atomics data path: nqps RC QPs, each with up to
// window FETCH_AND_ADDs in flight, posted as one chain per QP (the
// postlist). An atomic cannot be called back: a cancelled one keeps its
// slot until its completion comes, and that completion is dropped.
type atomicsConn struct {
	st     *stats
	cq     verbs.CQ
	resMR  verbs.MR // one 8-byte result per slot
	qps    []*atomicsQP
	window int
	free   int
	broken bool
	wcs    []verbs.WC
	addr   uint64
	rkey   uint32
	be     bool
	// slotID is the engine request in slot s (-1: free or cancelled),
	// idSlot the slot of request id (-1: none).
	slotID, idSlot []int
}

type atomicsQP struct {
	qp   verbs.QP
	busy []bool
	wrs  []verbs.SendWR
	sges []verbs.SGE
	nwr  int
}

// RC timing: a dead server is detected in about RetryCnt × 4 ms. A
// fetch-and-add the server's provider holds back because the lease is
// used up (an RNR NAK: spec/PROTOCOL.md, "Atomics: what a client may do
// to the counter") is resent until the lease is renewed or a fence tears
// the connection down: RNR retry 7 is unlimited.
const (
	rcTimeout  = 10 // 4.096 µs × 2^10 ≈ 4 ms
	rcRetryCnt = 7
	rcRNRRetry = 7
)

// dialAtomics admits the client in atomics mode with fresh QPs.
func dialAtomics(ctx context.Context, env *transportEnv) (transport, error) {
	a, err := newAtomics(env.pd, env.dev, env.st, env.qps, env.window)
	if err != nil {
		return nil, fmt.Errorf("client: atomics QPs: %w", err)
	}
	return admit(ctx, env, handshake.Admission{Window: env.window, QPs: a.endpoints()}, spec.ModeAtomics, a)
}

// newAtomics creates nqps RC QPs in RESET with window outstanding
// atomics each.
func newAtomics(pd verbs.PD, dev verbs.Device, st *stats, nqps, window int) (c *atomicsConn, err error) {
	if nqps < 1 || window < 1 || window > 1024 {
		return nil, fmt.Errorf("%w: %d QPs, window %d", ErrConfig, nqps, window)
	}
	c = &atomicsConn{st: st, window: window, be: dev.Attr().AtomicBigEndian}
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
		q := &atomicsQP{busy: make([]bool, window), wrs: make([]verbs.SendWR, window), sges: make([]verbs.SGE, window)}
		c.qps = append(c.qps, q)
		if q.qp, err = pd.CreateQP(verbs.QPInitAttr{Type: verbs.RC, SendCQ: c.cq, RecvCQ: c.cq,
			Cap: verbs.QPCap{MaxSendWR: window, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
			return nil, fmt.Errorf("atomics: client QP %d: %w", i, err)
		}
	}
	c.slotID, c.idSlot = make([]int, nqps*window), make([]int, nqps*window)
	for i := range c.slotID {
		c.slotID[i], c.idSlot[i] = -1, -1
	}
	c.wcs = make([]verbs.WC, 64)
	return c, nil
}

// endpoints names the QPs for admission.
func (c *atomicsConn) endpoints() []handshake.Endpoint {
	return endpointsOf(c.qps, func(q *atomicsQP) verbs.QP { return q.qp })
}

// attach connects the QPs to the server's.
func (c *atomicsConn) attach(g handshake.Grant) error {
	for i, q := range c.qps {
		if err := verbs.Connect(q.qp, verbs.ConnectAttr{Remote: g.ServerConnQPs[i].Addr, RemoteQPN: g.ServerConnQPs[i].QPN,
			SQPSN: g.ConnPSNs[i], Timeout: rcTimeout, RetryCnt: rcRetryCnt, RNRRetry: rcRNRRetry}); err != nil {
			return fmt.Errorf("atomics: client QP %d connect: %w", i, err)
		}
	}
	c.addr, c.rkey = g.RemoteAddr[0], g.RKey[0]
	c.free = len(c.qps) * c.window
	return nil
}

func (c *atomicsConn) Free() int {
	if c.broken {
		return 0
	}
	return c.free
}

func (c *atomicsConn) Outstanding() int { return len(c.qps)*c.window - c.free }

func (c *atomicsConn) Broken() bool { return c.broken }

func (c *atomicsConn) CQ() verbs.CQ { return c.cq }

// Expire: RC retransmits on its own.
func (c *atomicsConn) Expire(time.Duration) int { return 0 }

func (c *atomicsConn) NextDeadline() (time.Duration, bool) { return 0, false }

// Send posts FETCH_AND_ADDs for ids in free slots, one chain per QP.
func (c *atomicsConn) Send(now time.Duration, ids []int) (int, error) {
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
			s := qi*c.window + slot
			q.sges[q.nwr] = verbs.SGE{Addr: c.resMR.Addr() + uint64(s*spec.CounterLen), Length: spec.CounterLen, LKey: c.resMR.LKey()}
			q.wrs[q.nwr] = verbs.SendWR{ID: uint64(s), Opcode: verbs.OpAtomicFetchAdd, Flags: verbs.Signaled,
				SG: q.sges[q.nwr : q.nwr+1], RemoteAddr: c.addr, RKey: c.rkey, CompareAdd: spec.FetchAddDelta}
			q.nwr++
			q.busy[slot] = true
			c.free--
			c.slotID[s], c.idSlot[ids[n]] = ids[n], s
			n++
		}
		if q.nwr == 0 {
			continue
		}
		posted, err := q.qp.PostSend(q.wrs[:q.nwr])
		c.st.doorbell(posted)
		if err != nil {
			// The unposted ones go back (the QP is probably in ERR),
			// and so do the IDs after them: Send took a prefix.
			n -= q.nwr - posted
			for _, wr := range q.wrs[posted:q.nwr] {
				s := int(wr.ID)
				q.busy[s%c.window] = false
				c.free++
				c.idSlot[c.slotID[s]], c.slotID[s] = -1, -1
			}
			c.broken = true
			if ferr == nil {
				ferr = fmt.Errorf("atomics: post: %w", err)
			}
			break
		}
	}
	return n, ferr
}

func (c *atomicsConn) Poll(now time.Duration, res []result) int {
	n, err := c.cq.Poll(c.wcs[:min(len(res), len(c.wcs))])
	if err != nil {
		return 0
	}
	buf := c.resMR.Bytes()
	k := 0
	for _, wc := range c.wcs[:n] {
		s := int(wc.ID)
		qi, slot := s/c.window, s%c.window
		if qi >= len(c.qps) || !c.qps[qi].busy[slot] {
			continue
		}
		c.qps[qi].busy[slot] = false
		c.free++
		id := c.slotID[s]
		c.slotID[s] = -1
		if wc.Status != verbs.WCSuccess {
			c.broken = true
		}
		if id < 0 {
			continue // cancelled
		}
		c.idSlot[id] = -1
		if wc.Status != verbs.WCSuccess {
			res[k] = result{ID: id, Err: wc.Err()}
		} else {
			v := binary.LittleEndian.Uint64(buf[s*spec.CounterLen:])
			if c.be {
				v = binary.BigEndian.Uint64(buf[s*spec.CounterLen:])
			}
			res[k] = result{ID: id, Value: v}
		}
		k++
	}
	return k
}

// Cancel drops request id: its slot stays busy until the atomic
// completes, and the value it fetched is dropped.
func (c *atomicsConn) Cancel(id int) {
	if s := c.idSlot[id]; s >= 0 {
		c.slotID[s], c.idSlot[id] = -1, -1
	}
}

// Close releases the resources (not the PD).
func (c *atomicsConn) Close() error {
	for _, q := range c.qps {
		closeAll(q.qp)
	}
	c.qps = nil
	closeAll(c.resMR, c.cq)
	return nil
}
