package worker

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/seqd/seqd/verbs"
)

// UDRing is the request side of a worker that takes its requests as UD
// SENDs into receive buffers of its own (fasst, erpc): the request QP
// and its CQs (UDRequestQueue), one registered buffer of Slot bytes per
// receive, and the receive descriptors, built once (FaSST's cheap RECV
// posting): receive slot i is always RWRs[i], so that a batch re-posts
// its buffers as one chain of them.
type UDRing struct {
	ReqCQ, SendCQ verbs.CQ
	ReqQP         verbs.QP
	RecvMR        verbs.MR
	RWRs          []verbs.RecvWR
	RSGE          []verbs.SGE
}

// Open makes the ring on pd: depth receives of slot bytes each, every
// one posted. What it made is kept on an error, for Close to release.
func (r *UDRing) Open(c *Config, pd verbs.PD, depth, slot int) (err error) {
	if r.ReqCQ, r.SendCQ, r.ReqQP, err = c.UDRequestQueue(pd, depth, depth); err != nil {
		return err
	}
	if r.RecvMR, err = pd.RegMR(depth*slot, verbs.AccessLocalWrite); err != nil {
		return fmt.Errorf("receive buffers: %w", err)
	}
	r.RWRs = make([]verbs.RecvWR, depth)
	r.RSGE = make([]verbs.SGE, depth)
	for i := range r.RWRs {
		r.RSGE[i] = verbs.SGE{Addr: r.RecvMR.Addr() + uint64(i*slot), Length: uint32(slot), LKey: r.RecvMR.LKey()}
		r.RWRs[i] = verbs.RecvWR{ID: uint64(i), SG: r.RSGE[i : i+1]}
	}
	for off := 0; off < len(r.RWRs); {
		n, err := r.ReqQP.PostRecv(r.RWRs[off:])
		if err != nil {
			return fmt.Errorf("post receives: %w", err)
		}
		off += n
	}
	return nil
}

// ToErr moves the request QP to ERR (Stop).
func (r *UDRing) ToErr() {
	if r.ReqQP != nil {
		r.ReqQP.Modify(&verbs.QPAttr{State: verbs.StateErr}, verbs.AttrState)
	}
}

// Close destroys what Open made.
func (r *UDRing) Close() { CloseAll(r.ReqQP, r.RecvMR, r.ReqCQ, r.SendCQ) }

// Serve is the worker's loop over the ring until stopped: it polls the
// request CQ into wcs, reaps the sends (reap), and hands each non-empty
// burst to batch. An empty poll yields; after spin of them in a row
// (on the clock since start) it blocks in the CQ's Wait until ctx ends
// or a completion comes; a negative spin never blocks.
func (r *UDRing) Serve(ctx context.Context, stopped *atomic.Bool, start time.Time, spin time.Duration,
	wcs []verbs.WC, onErr func(error), reap func(), batch func([]verbs.WC)) {
	idleSince := time.Duration(-1)
	for !stopped.Load() {
		n, err := r.ReqCQ.Poll(wcs)
		if err != nil {
			onErr(err)
			n = 0
		}
		reap()
		if n == 0 {
			now := time.Since(start)
			if idleSince < 0 {
				idleSince = now
			} else if spin >= 0 && now-idleSince > spin {
				r.ReqCQ.Wait(ctx)
				idleSince = -1
			} else {
				runtime.Gosched()
			}
			continue
		}
		idleSince = -1
		batch(wcs[:n])
	}
}
