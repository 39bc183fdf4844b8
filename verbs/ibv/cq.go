//go:build ibverbs && cgo

package ibv

/*
#include "shim.h"
*/
import "C"

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/seqd/seqd/verbs"
)

var _ verbs.CQ = (*cq)(nil)

// maxPollBatch bounds the completions one Poll moves (one cgo call).
const maxPollBatch = 256

// cq is an ibv_cq with its own completion channel. The channel's fd is
// nonblocking and a duplicate of it sits in Go's netpoller, so Wait parks
// a goroutine rather than a thread.
type cq struct {
	dev  *device
	c    *C.struct_seqd_cq
	out  []C.struct_seqd_wc // the batch, in C memory
	life life

	closed atomic.Bool
	broken atomic.Bool // IBV_EVENT_CQ_ERR arrived: the CQ cannot be used
	pollMu sync.Mutex
	// drained is the clock read before the last poll that found the CQ
	// empty (returned less than asked), under pollMu; waited says a Wait
	// returned since, so that bound no longer holds.
	drained verbs.Time
	waited  atomic.Bool
	waitMu  sync.Mutex
	ch      *os.File // a dup of the channel fd, for the netpoller
	raw     syscall.RawConn

	// QPs that receive into this CQ, by QPN: Poll finds the GRH of UD
	// receives through them.
	qpsMu sync.RWMutex
	qps   map[uint32]*qp
}

// CreateCQ creates a completion queue of at least cqe entries, armed for
// the next completion.
func (d *device) CreateCQ(cqe int) (verbs.CQ, error) {
	if cqe <= 0 || (d.attr.MaxCQE > 0 && cqe > d.attr.MaxCQE) {
		return nil, fmt.Errorf("%w: CQ of %d entries (device max %d)", verbs.ErrInvalidArgument, cqe, d.attr.MaxCQE)
	}
	if err := d.life.acquire("ibv device " + d.name); err != nil {
		return nil, err
	}
	c, err := d.createCQ(cqe)
	if err != nil {
		d.life.release()
		return nil, err
	}
	return c, nil
}

func (d *device) createCQ(cqe int) (_ *cq, err error) {
	ch, errno := C.ibv_create_comp_channel(d.ctx)
	if ch == nil {
		return nil, fmt.Errorf("ibv: ibv_create_comp_channel: %w", errnoErr(errno))
	}
	defer func() {
		if err != nil {
			C.ibv_destroy_comp_channel(ch)
		}
	}()
	if err := unix.SetNonblock(int(ch.fd), true); err != nil {
		return nil, fmt.Errorf("ibv: completion channel: %w", err)
	}
	dup, err := unix.FcntlInt(uintptr(ch.fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("ibv: completion channel: dup: %w", err)
	}
	f := os.NewFile(uintptr(dup), "ibv-comp-channel")
	defer func() {
		if err != nil {
			f.Close()
		}
	}()
	raw, err := f.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("ibv: completion channel: %w", err)
	}
	icq, errno := C.ibv_create_cq(d.ctx, C.int(cqe), nil, ch, 0)
	if icq == nil {
		return nil, fmt.Errorf("ibv: ibv_create_cq %d entries: %w", cqe, errnoErr(errno))
	}
	defer func() {
		if err != nil {
			C.ibv_destroy_cq(icq)
		}
	}()
	batch := min(int(icq.cqe), maxPollBatch)
	sc := C.seqd_cq_alloc(C.int(batch))
	if sc == nil {
		return nil, fmt.Errorf("ibv: CQ poll batch: out of memory")
	}
	sc.cq, sc.ch = icq, ch
	if rc := C.seqd_req_notify(icq); rc != 0 {
		C.seqd_cq_free(sc)
		return nil, fmt.Errorf("ibv: ibv_req_notify_cq: %w", rcErr(rc, nil))
	}
	c := &cq{dev: d, c: sc, out: unsafe.Slice(sc.out, int(sc.n)), ch: f, raw: raw, qps: map[uint32]*qp{}}
	d.addCQ(c)
	return c, nil
}

// Poll moves up to min(len(wc), 256) completions into wc with one cgo call.
//
// Receive completions are stamped (WC.Arrived) from the host clock, read
// once per poll just before ibv_poll_cq. While the caller keeps polling,
// a completion is stamped with the clock read of the last poll that found
// the CQ drained: it was written after that, so its age is over-, never
// under-estimated (by at most the caller's polling interval). After a
// Wait, and before any poll drained the CQ, it is stamped with this
// poll's read, which leaves out how long it sat in the CQ (the wakeup
// latency). The NIC's own completion timestamps (ibv_create_cq_ex with
// IBV_WC_EX_WITH_COMPLETION_TIMESTAMP) would close that gap; they are not
// used yet.
func (c *cq) Poll(wc []verbs.WC) (int, error) {
	c.pollMu.Lock()
	defer c.pollMu.Unlock()
	if c.closed.Load() {
		return 0, fmt.Errorf("%w: ibv CQ", verbs.ErrClosed)
	}
	if c.broken.Load() {
		return 0, fmt.Errorf("%w: IBV_EVENT_CQ_ERR: the CQ overran and cannot be used", verbs.ErrCQOverrun)
	}
	if len(wc) == 0 {
		return 0, nil
	}
	now := verbs.Now()
	asked := min(len(wc), len(c.out))
	c.dev.crossings.Add(1)
	got := int(C.seqd_poll(c.c, C.int(asked)))
	if got < 0 {
		return 0, fmt.Errorf("%w: ibv_poll_cq failed (%d): the CQ is in error", verbs.ErrCQOverrun, got)
	}
	stamp := c.drained
	if c.waited.Swap(false) || stamp == 0 {
		stamp = now
		c.drained = 0
	}
	if got < asked {
		c.drained = now
	}
	c.qpsMu.RLock()
	for i, o := range c.out[:got] {
		w := &wc[i]
		*w = verbs.WC{
			ID:        uint64(o.wr_id),
			Status:    wcStatusFromC(o.status),
			Opcode:    wcOpcodeFromC(o.opcode),
			Flags:     wcFlagsFromC(o.wc_flags),
			ByteLen:   uint32(o.byte_len),
			Imm:       uint32(o.imm),
			QPN:       verbs.QPN(o.qp_num),
			SrcQP:     verbs.QPN(o.src_qp),
			PKeyIndex: uint16(o.pkey_index),
			VendorErr: uint32(o.vendor_err),
		}
		if q := c.qps[uint32(o.qp_num)]; q != nil {
			q.completeRecv(c, w, uint16(o.slid))
		}
		if w.Status == verbs.WCSuccess && w.Opcode >= verbs.WCRecv {
			w.Arrived = stamp
		}
	}
	c.qpsMu.RUnlock()
	return got, nil
}

// Wait blocks until the CQ has signalled a completion since the last
// Wait, or ctx is done. The CQ is re-armed before Wait returns, so the
// usual loop (poll until empty, then Wait) cannot miss a completion; a
// Wait may return with nothing to poll.
func (c *cq) Wait(ctx context.Context) error {
	if ctx == nil {
		return fmt.Errorf("%w: nil context", verbs.ErrInvalidArgument)
	}
	c.waitMu.Lock()
	defer c.waitMu.Unlock()
	if c.closed.Load() {
		return fmt.Errorf("%w: ibv CQ", verbs.ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	// The caller slept: the next stamps come from the poll itself (see
	// Poll), not from a drained poll from before the sleep.
	defer c.waited.Store(true)
	if err := c.ch.SetReadDeadline(time.Time{}); err != nil {
		return fmt.Errorf("ibv: completion channel: %w", err)
	}
	woken := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		c.ch.SetReadDeadline(time.Unix(1, 0))
		close(woken)
	})
	var rc C.int
	err := c.raw.Read(func(uintptr) bool {
		if c.closed.Load() {
			return true
		}
		rc = C.seqd_cq_event(c.c)
		return rc != C.EAGAIN
	})
	if !stop() {
		<-woken
	}
	switch {
	case c.closed.Load():
		return fmt.Errorf("%w: ibv CQ closed while waiting", verbs.ErrClosed)
	case err != nil && ctx.Err() != nil:
		return ctx.Err()
	case err != nil:
		return fmt.Errorf("ibv: waiting for a completion event: %w", err)
	case rc != 0:
		return fmt.Errorf("ibv: ibv_get_cq_event: %w", rcErr(rc, nil))
	}
	return nil
}

// Close destroys the CQ; the QPs using it must be closed first. A Wait in
// progress returns ErrClosed.
func (c *cq) Close() error {
	if err := c.life.close("ibv CQ"); err != nil {
		return err
	}
	c.closed.Store(true)
	c.ch.SetReadDeadline(time.Unix(1, 0))
	c.waitMu.Lock()
	defer c.waitMu.Unlock()
	c.pollMu.Lock()
	defer c.pollMu.Unlock()
	defer c.dev.life.release()
	c.dev.removeCQ(c)
	c.ch.Close()
	// All events were acknowledged as they were read, as
	// ibv_destroy_cq requires.
	rc, errno := C.ibv_destroy_cq(c.c.cq)
	if rc != 0 {
		return fmt.Errorf("ibv: ibv_destroy_cq: %w", rcErr(rc, errno))
	}
	ch := c.c.ch
	C.seqd_cq_free(c.c)
	c.c, c.out = nil, nil
	if rc, errno := C.ibv_destroy_comp_channel(ch); rc != 0 {
		return fmt.Errorf("ibv: ibv_destroy_comp_channel: %w", rcErr(rc, errno))
	}
	return nil
}
