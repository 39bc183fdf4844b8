package verbstest_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"unsafe"

	"github.com/seqd/seqd/verbs"
	"github.com/seqd/seqd/verbs/verbstest"
)

// This file is a deliberately simple in-memory provider: every operation
// happens synchronously inside PostSend under one lock. It exists to test
// the suite itself (a suite that fails a correct provider, or passes
// anything, is worse than none); it is not a provider to build on.

func TestSuiteOnMemProvider(t *testing.T) {
	verbstest.Run(t, func(t *testing.T) (a, b verbs.Device) {
		n := &memNet{devs: map[uint16]*memDev{}}
		return n.open(), n.open()
	})
}

type memNet struct {
	mu   sync.Mutex
	devs map[uint16]*memDev
	port uint16
	key  uint32
	qpn  verbs.QPN
}

var loopGID = verbs.GIDFromAddr(netip.MustParseAddr("127.0.0.1"))

func (n *memNet) open() *memDev {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.port++
	d := &memDev{net: n, port: 40000 + n.port, qps: map[verbs.QPN]*memQP{}, ctr: map[string]uint64{}}
	n.devs[d.port] = d
	return d
}

type memDev struct {
	net  *memNet
	port uint16
	mrs  []*memMR
	qps  map[verbs.QPN]*memQP
	ctr  map[string]uint64
}

var _ verbs.Counters = (*memDev)(nil)

func (d *memDev) Name() string { return fmt.Sprintf("mem:%d", d.port) }
func (d *memDev) Attr() verbs.DeviceAttr {
	return verbs.DeviceAttr{MaxQP: 1024, MaxQPWR: 1024, MaxSGE: 8, MaxCQE: 4096, MaxMRSize: 1 << 30,
		MaxInline: 256, MaxRdAtomic: 16, ActiveMTU: verbs.MTU1024, Queues: 1}
}
func (d *memDev) AllocPD() (verbs.PD, error) { return &memPD{d: d}, nil }
func (d *memDev) CreateCQ(n int) (verbs.CQ, error) {
	return &memCQ{d: d, ch: make(chan struct{}, 1)}, nil
}
func (d *memDev) Close() error { return nil }
func (d *memDev) VisitCounters(f func(string, uint64)) {
	d.net.mu.Lock()
	defer d.net.mu.Unlock()
	for _, k := range []string{verbs.CounterDropNoRecv, verbs.CounterDropBadQKey, verbs.CounterDropRKey} {
		f(k, d.ctr[k])
	}
}

type memPD struct{ d *memDev }

func (p *memPD) RegMR(n int, acc verbs.Access) (verbs.MR, error) {
	p.d.net.mu.Lock()
	defer p.d.net.mu.Unlock()
	p.d.net.key++
	// Pad so that the next MR never starts right after this one.
	b := make([]byte, n+64)[32 : 32+n]
	mr := &memMR{d: p.d, b: b, acc: acc, key: p.d.net.key}
	p.d.mrs = append(p.d.mrs, mr)
	return mr, nil
}
func (p *memPD) CreateAH(a verbs.AHAttr) (verbs.AH, error) { return &memAH{a.Dest}, nil }
func (p *memPD) Close() error                              { return nil }
func (p *memPD) CreateQP(a verbs.QPInitAttr) (verbs.QP, error) {
	p.d.net.mu.Lock()
	defer p.d.net.mu.Unlock()
	p.d.net.qpn++
	q := &memQP{d: p.d, qpn: p.d.net.qpn + 16, init: a, scq: a.SendCQ.(*memCQ), rcq: a.RecvCQ.(*memCQ)}
	p.d.qps[q.qpn] = q
	return q, nil
}

type memMR struct {
	d   *memDev
	b   []byte
	acc verbs.Access
	key uint32
}

func (m *memMR) Bytes() []byte { return m.b }
func (m *memMR) Addr() uint64  { return uint64(uintptr(unsafe.Pointer(&m.b[0]))) }
func (m *memMR) LKey() uint32  { return m.key }
func (m *memMR) RKey() uint32  { return m.key }
func (m *memMR) Close() error  { return nil }

// mem returns the n bytes at addr if key names an MR of d with acc
// covering them.
func (d *memDev) mem(key uint32, addr uint64, n uint32, acc verbs.Access) []byte {
	for _, m := range d.mrs {
		if m.key != key || m.acc&acc != acc {
			continue
		}
		if addr < m.Addr() || addr+uint64(n) > m.Addr()+uint64(len(m.b)) || addr+uint64(n) < addr {
			return nil
		}
		off := addr - m.Addr()
		return m.b[off : off+uint64(n)]
	}
	return nil
}

type memAH struct{ dest verbs.Address }

func (*memAH) Close() error { return nil }

type memCQ struct {
	d   *memDev
	wcs []verbs.WC
	ch  chan struct{}
}

func (c *memCQ) push(wc verbs.WC) {
	c.wcs = append(c.wcs, wc)
	select {
	case c.ch <- struct{}{}:
	default:
	}
}
func (c *memCQ) Poll(wc []verbs.WC) (int, error) {
	c.d.net.mu.Lock()
	defer c.d.net.mu.Unlock()
	n := copy(wc, c.wcs)
	c.wcs = c.wcs[n:]
	return n, nil
}
func (c *memCQ) Wait(ctx context.Context) error {
	c.d.net.mu.Lock()
	ready := len(c.wcs) > 0
	c.d.net.mu.Unlock()
	if ready {
		return nil
	}
	select {
	case <-c.ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
func (c *memCQ) Close() error { return nil }

type memQP struct {
	d        *memDev
	qpn      verbs.QPN
	init     verbs.QPInitAttr
	scq, rcq *memCQ
	state    verbs.QPState
	attr     verbs.QPAttr
	recvs    []verbs.RecvWR
	closed   bool
}

func (q *memQP) QPN() verbs.QPN         { return q.qpn }
func (q *memQP) Type() verbs.QPType     { return q.init.Type }
func (q *memQP) State() verbs.QPState   { return q.state }
func (q *memQP) Address() verbs.Address { return verbs.Address{GID: loopGID, Port: q.d.port} }
func (q *memQP) Close() error {
	q.d.net.mu.Lock()
	defer q.d.net.mu.Unlock()
	if q.closed {
		return verbs.ErrClosed
	}
	q.closed = true
	return nil
}

func (q *memQP) Modify(a *verbs.QPAttr, mask verbs.QPAttrMask) error {
	q.d.net.mu.Lock()
	defer q.d.net.mu.Unlock()
	if q.closed {
		return verbs.ErrClosed
	}
	next, err := verbs.CheckModify(q.init.Type, q.state, a, mask)
	if err != nil {
		return err
	}
	if mask&verbs.AttrQKey != 0 {
		q.attr.QKey = a.QKey
	}
	if mask&verbs.AttrAccessFlags != 0 {
		q.attr.AccessFlags = a.AccessFlags
	}
	if mask&verbs.AttrAV != 0 {
		q.attr.AH = a.AH
	}
	if mask&verbs.AttrDestQPN != 0 {
		q.attr.DestQPN = a.DestQPN
	}
	if mask&verbs.AttrPathMTU != 0 {
		q.attr.PathMTU = a.PathMTU
	}
	q.state = next
	if next == verbs.StateErr {
		q.flush()
	}
	return nil
}

func (q *memQP) flush() {
	for _, r := range q.recvs {
		q.rcq.push(verbs.WC{ID: r.ID, Status: verbs.WCWRFlushErr, QPN: q.qpn})
	}
	q.recvs = nil
}

func (q *memQP) PostRecv(wrs []verbs.RecvWR) (int, error) {
	q.d.net.mu.Lock()
	defer q.d.net.mu.Unlock()
	if q.closed {
		return 0, verbs.ErrClosed
	}
	if q.state == verbs.StateReset {
		return 0, verbs.ErrQPState
	}
	for i, r := range wrs {
		if len(r.SG) > q.init.Cap.MaxRecvSGE {
			return i, verbs.ErrInvalidArgument
		}
		for _, s := range r.SG {
			if q.d.mem(s.LKey, s.Addr, s.Length, verbs.AccessLocalWrite) == nil {
				return i, verbs.ErrInvalidArgument
			}
		}
		q.recvs = append(q.recvs, r)
	}
	return len(wrs), nil
}

func (q *memQP) PostSend(wrs []verbs.SendWR) (int, error) {
	q.d.net.mu.Lock()
	defer q.d.net.mu.Unlock()
	if q.closed {
		return 0, verbs.ErrClosed
	}
	if q.state != verbs.StateRTS {
		return 0, verbs.ErrQPState
	}
	for i := range wrs {
		if err := q.check(&wrs[i]); err != nil {
			return i, err
		}
		if q.state == verbs.StateErr {
			// An earlier WR failed: the rest of the chain is flushed.
			q.scq.push(verbs.WC{ID: wrs[i].ID, Status: verbs.WCWRFlushErr, QPN: q.qpn})
			continue
		}
		q.exec(&wrs[i])
	}
	return len(wrs), nil
}

func (q *memQP) check(wr *verbs.SendWR) error {
	t := q.init.Type
	switch wr.Opcode {
	case verbs.OpSend, verbs.OpSendWithImm:
	case verbs.OpRDMAWrite, verbs.OpRDMAWriteWithImm:
		if t == verbs.UD {
			return verbs.ErrInvalidArgument
		}
	case verbs.OpRDMARead, verbs.OpAtomicFetchAdd, verbs.OpAtomicCmpSwap:
		if t != verbs.RC {
			return verbs.ErrInvalidArgument
		}
		if wr.Opcode != verbs.OpRDMARead && (len(wr.SG) != 1 || wr.SG[0].Length != 8) {
			return verbs.ErrInvalidArgument
		}
	default:
		return verbs.ErrInvalidArgument
	}
	if len(wr.SG) > q.init.Cap.MaxSendSGE {
		return verbs.ErrInvalidArgument
	}
	n := 0
	for _, s := range wr.SG {
		if q.d.mem(s.LKey, s.Addr, s.Length, 0) == nil {
			return verbs.ErrInvalidArgument
		}
		n += int(s.Length)
	}
	if t == verbs.UD && (wr.AH == nil || n > q.d.Attr().ActiveMTU.Bytes()) {
		return verbs.ErrInvalidArgument
	}
	return nil
}

func (q *memQP) gather(sg []verbs.SGE) []byte {
	var p []byte
	for _, s := range sg {
		p = append(p, q.d.mem(s.LKey, s.Addr, s.Length, 0)...)
	}
	return p
}

// scatter writes p into the RECV's list; false if it does not fit.
func (q *memQP) scatter(sg []verbs.SGE, p []byte) bool {
	for _, s := range sg {
		m := q.d.mem(s.LKey, s.Addr, s.Length, verbs.AccessLocalWrite)
		p = p[copy(m, p):]
	}
	return len(p) == 0
}

func (q *memQP) complete(wr *verbs.SendWR, op verbs.WCOpcode, st verbs.WCStatus) {
	if st != verbs.WCSuccess || q.init.SigAll || wr.Flags&verbs.Signaled != 0 {
		q.scq.push(verbs.WC{ID: wr.ID, Status: st, Opcode: op, QPN: q.qpn})
	}
	if st != verbs.WCSuccess {
		q.state = verbs.StateErr
	}
}

var sendOps = map[verbs.Opcode]verbs.WCOpcode{
	verbs.OpSend: verbs.WCSend, verbs.OpSendWithImm: verbs.WCSend,
	verbs.OpRDMAWrite: verbs.WCRDMAWrite, verbs.OpRDMAWriteWithImm: verbs.WCRDMAWrite,
	verbs.OpRDMARead: verbs.WCRDMARead, verbs.OpAtomicFetchAdd: verbs.WCFetchAdd, verbs.OpAtomicCmpSwap: verbs.WCCompSwap,
}

func (q *memQP) exec(wr *verbs.SendWR) {
	op := sendOps[wr.Opcode]
	p := q.gather(wr.SG)
	var dest verbs.Address
	var dqpn verbs.QPN
	if q.init.Type == verbs.UD {
		dest, dqpn = wr.AH.(*memAH).dest, wr.RemoteQPN
	} else {
		dest, dqpn = q.attr.AH.Dest, q.attr.DestQPN
	}
	var r *memQP
	if d := q.d.net.devs[dest.Port]; d != nil {
		r = d.qps[dqpn]
	}
	if r == nil || r.closed || r.state < verbs.StateRTR || r.state == verbs.StateErr {
		if q.init.Type == verbs.RC {
			q.complete(wr, op, verbs.WCRetryExcErr) // nobody ever answers
			return
		}
		q.complete(wr, op, verbs.WCSuccess) // the packet is lost on the wire
		return
	}
	imm := wr.Opcode == verbs.OpSendWithImm || wr.Opcode == verbs.OpRDMAWriteWithImm
	recv := func(payload []byte, wcop verbs.WCOpcode, n int) bool {
		if len(r.recvs) == 0 {
			r.d.ctr[verbs.CounterDropNoRecv]++
			return false
		}
		rw := r.recvs[0]
		r.recvs = r.recvs[1:]
		wc := verbs.WC{ID: rw.ID, Opcode: wcop, ByteLen: uint32(n), QPN: r.qpn, Imm: wr.Imm}
		if imm {
			wc.Flags |= verbs.WCWithImm
		}
		if q.init.Type == verbs.UD {
			wc.Flags |= verbs.WCGRH
			wc.SrcQP, wc.Src = q.qpn, q.Address()
		}
		if !r.scatter(rw.SG, payload) {
			wc.Status = verbs.WCLocLenErr
		}
		r.rcq.push(wc)
		return true
	}
	remote := func(acc verbs.Access, n uint32) []byte {
		m := r.d.mem(wr.RKey, wr.RemoteAddr, n, acc)
		if m == nil {
			r.d.ctr[verbs.CounterDropRKey]++
		}
		return m
	}
	switch wr.Opcode {
	case verbs.OpSend, verbs.OpSendWithImm:
		if q.init.Type == verbs.UD {
			if wr.RemoteQKey != r.attr.QKey {
				r.d.ctr[verbs.CounterDropBadQKey]++
				break
			}
			grh := make([]byte, verbs.GRHLen)
			grh[20] = 0x45
			copy(grh[32:36], []byte{127, 0, 0, 1})
			copy(grh[36:40], []byte{127, 0, 0, 1})
			recv(append(grh, p...), verbs.WCRecv, len(grh)+len(p))
			break
		}
		recv(p, verbs.WCRecv, len(p))
	case verbs.OpRDMAWrite, verbs.OpRDMAWriteWithImm:
		m := remote(verbs.AccessRemoteWrite, uint32(len(p)))
		if m == nil && len(p) > 0 {
			if q.init.Type == verbs.RC {
				q.complete(wr, op, verbs.WCRemAccessErr)
				return
			}
			break
		}
		copy(m, p)
		if imm {
			recv(nil, verbs.WCRecvRDMAWithImm, len(p))
		}
	case verbs.OpRDMARead:
		m := remote(verbs.AccessRemoteRead, wr.SG[0].Length)
		if m == nil {
			q.complete(wr, op, verbs.WCRemAccessErr)
			return
		}
		q.scatter(wr.SG, m)
	case verbs.OpAtomicFetchAdd, verbs.OpAtomicCmpSwap:
		m := remote(verbs.AccessRemoteAtomic, 8)
		if m == nil {
			q.complete(wr, op, verbs.WCRemAccessErr)
			return
		}
		old := binary.LittleEndian.Uint64(m)
		q.scatter(wr.SG, m)
		if wr.Opcode == verbs.OpAtomicFetchAdd {
			binary.LittleEndian.PutUint64(m, old+wr.CompareAdd)
		} else if old == wr.CompareAdd {
			binary.LittleEndian.PutUint64(m, wr.Swap)
		}
	}
	q.complete(wr, op, verbs.WCSuccess)
}
