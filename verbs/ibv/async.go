package ibv

import (
	"sync/atomic"
)

// asyncKind is what an asynchronous event (ibv_get_async_event(3)) is
// about, as far as seqd acts on it.
type asyncKind uint8

const (
	asyncCQErr       asyncKind = iota // IBV_EVENT_CQ_ERR: a CQ overran and cannot be used
	asyncQPFatal                      // IBV_EVENT_QP_FATAL
	asyncQPReqErr                     // IBV_EVENT_QP_REQ_ERR
	asyncQPAccessErr                  // IBV_EVENT_QP_ACCESS_ERR
	asyncPortActive                   // IBV_EVENT_PORT_ACTIVE
	asyncPortErr                      // IBV_EVENT_PORT_ERR
	asyncDeviceFatal                  // IBV_EVENT_DEVICE_FATAL
	asyncOther                        // anything else (counted only)
	nAsyncKinds
)

// asyncCounterNames are the counters the device reports per kind.
var asyncCounterNames = [nAsyncKinds]string{
	"async_cq_err", "async_qp_fatal", "async_qp_req_err", "async_qp_access_err",
	"async_port_active", "async_port_err", "async_device_fatal", "async_other",
}

// asyncState is what a device keeps of its asynchronous events: counts,
// and whether its port is down or the device is dead. The objects an
// event names (a CQ, a QP) record their own error.
type asyncState struct {
	counts   [nAsyncKinds]atomic.Uint64
	portDown atomic.Bool
	fatal    atomic.Bool
}

// record counts an event and updates the device-wide flags.
func (a *asyncState) record(k asyncKind) {
	if k >= nAsyncKinds {
		k = asyncOther
	}
	a.counts[k].Add(1)
	switch k {
	case asyncPortErr:
		a.portDown.Store(true)
	case asyncPortActive:
		a.portDown.Store(false)
	case asyncDeviceFatal:
		a.fatal.Store(true)
	}
}

// visit reports the counts, and port_down and device_fatal as 0 or 1.
func (a *asyncState) visit(f func(string, uint64)) {
	for k := range a.counts {
		f(asyncCounterNames[k], a.counts[k].Load())
	}
	f("port_down", b2u(a.portDown.Load()))
	f("device_fatal", b2u(a.fatal.Load()))
}

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}
