//go:build ibverbs && cgo

package ibv

/*
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/seqd/seqd/verbs"
)

// asyncObjs indexes a device's CQs (by C address) and QPs (by number),
// so that an asynchronous event can find what it names.
type asyncObjs struct {
	mu  sync.Mutex
	cqs map[uintptr]*cq
	qps map[uint32]*qp
}

func (d *device) addCQ(c *cq) {
	d.objs.mu.Lock()
	if d.objs.cqs == nil {
		d.objs.cqs = map[uintptr]*cq{}
	}
	d.objs.cqs[uintptr(unsafe.Pointer(c.c.cq))] = c
	d.objs.mu.Unlock()
}

func (d *device) removeCQ(c *cq) {
	d.objs.mu.Lock()
	delete(d.objs.cqs, uintptr(unsafe.Pointer(c.c.cq)))
	d.objs.mu.Unlock()
}

func (d *device) addQP(q *qp) {
	d.objs.mu.Lock()
	if d.objs.qps == nil {
		d.objs.qps = map[uint32]*qp{}
	}
	d.objs.qps[uint32(q.qpn)] = q
	d.objs.mu.Unlock()
}

func (d *device) removeQP(q *qp) {
	d.objs.mu.Lock()
	delete(d.objs.qps, uint32(q.qpn))
	d.objs.mu.Unlock()
}

// asyncKindOf maps an enum ibv_event_type.
func asyncKindOf(t C.int) asyncKind {
	switch t {
	case C.IBV_EVENT_CQ_ERR:
		return asyncCQErr
	case C.IBV_EVENT_QP_FATAL:
		return asyncQPFatal
	case C.IBV_EVENT_QP_REQ_ERR:
		return asyncQPReqErr
	case C.IBV_EVENT_QP_ACCESS_ERR:
		return asyncQPAccessErr
	case C.IBV_EVENT_PORT_ACTIVE:
		return asyncPortActive
	case C.IBV_EVENT_PORT_ERR:
		return asyncPortErr
	case C.IBV_EVENT_DEVICE_FATAL:
		return asyncDeviceFatal
	}
	return asyncOther
}

// onAsync acts on one asynchronous event: a CQ_ERR breaks its CQ (Poll
// then fails with ErrCQOverrun: "the CQ cannot be used", ibv_poll_cq(3));
// a QP error event puts the QP in ERR (State reports it; its work
// requests complete flushed; Modify to RESET and a new bring-up recover
// it); port and device events set the
// device's flags. Every event is counted and logged.
func (d *device) onAsync(k asyncKind, cqAddr uintptr, qpn uint32, port int) {
	if k == asyncPortActive || k == asyncPortErr {
		if port != int(d.port) {
			k = asyncOther // another port of the device
		}
	}
	d.async.record(k)
	log := slog.Default().With("verbs", "ibv", "device", d.name)
	switch k {
	case asyncCQErr:
		d.objs.mu.Lock()
		c := d.objs.cqs[cqAddr]
		d.objs.mu.Unlock()
		if c != nil {
			c.broken.Store(true)
		}
		log.Error("CQ overrun (IBV_EVENT_CQ_ERR): the CQ cannot be used")
	case asyncQPFatal, asyncQPReqErr, asyncQPAccessErr:
		d.objs.mu.Lock()
		q := d.objs.qps[qpn]
		d.objs.mu.Unlock()
		if q != nil {
			q.state.Store(uint32(verbs.StateErr))
		}
		log.Error("QP in error", "event", asyncCounterNames[k], "qpn", verbs.QPN(qpn))
	case asyncPortErr:
		log.Error("port down (IBV_EVENT_PORT_ERR)", "port", port)
	case asyncPortActive:
		log.Info("port active (IBV_EVENT_PORT_ACTIVE)", "port", port)
	case asyncDeviceFatal:
		log.Error("device fatal error (IBV_EVENT_DEVICE_FATAL)")
	}
}

// startAsync reads the context's asynchronous events in a goroutine that
// parks in Go's netpoller on a duplicate of the nonblocking async fd.
func (d *device) startAsync() error {
	fd := int(d.ctx.async_fd)
	if err := unix.SetNonblock(fd, true); err != nil {
		return fmt.Errorf("ibv: async event fd: %w", err)
	}
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("ibv: async event fd: dup: %w", err)
	}
	f := os.NewFile(uintptr(dup), "ibv-async")
	raw, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return fmt.Errorf("ibv: async event fd: %w", err)
	}
	d.asyncFile = f
	d.asyncDone = make(chan struct{})
	go func() {
		defer close(d.asyncDone)
		for !d.asyncStop.Load() {
			err := raw.Read(func(uintptr) bool {
				for !d.asyncStop.Load() {
					var typ, port C.int
					var cqAddr C.uintptr_t
					var qpn C.uint32_t
					rc := C.seqd_async_event(d.ctx, &typ, &cqAddr, &qpn, &port)
					if rc == C.EAGAIN {
						return false
					}
					if rc != 0 {
						return true
					}
					d.onAsync(asyncKindOf(typ), uintptr(cqAddr), uint32(qpn), int(port))
				}
				return true
			})
			if err != nil && !d.asyncStop.Load() {
				slog.Default().Error("ibv: reading async events", "device", d.name, "err", err)
				time.Sleep(100 * time.Millisecond)
			}
		}
	}()
	return nil
}

// stopAsync ends the async goroutine before the context closes.
func (d *device) stopAsync() {
	if d.asyncFile == nil {
		return
	}
	d.asyncStop.Store(true)
	d.asyncFile.SetReadDeadline(time.Unix(1, 0))
	<-d.asyncDone
	d.asyncFile.Close()
}
