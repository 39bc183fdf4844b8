//go:build ibverbs && cgo

package ibv

/*
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"sync"

	"github.com/seqd/seqd/verbs"
)

var _ verbs.ManyPoster = (*device)(nil)

// manyScratch holds PostMany's arrays for the C call (C pointers and
// counts in Go memory, which cgo allows), reused across calls.
type manyScratch struct {
	mu  sync.Mutex
	qps []*C.struct_seqd_qp
	n   []C.int
	rq  []*qp
}

// PostMany implements verbs.ManyPoster: every receive chain and the send
// chain cross into C once (seqd_post_many: one ibv_post_recv per chain,
// one ibv_post_send). The receive QPs must be distinct QPs of this device.
// Calls are serialized per device; posts to single QPs are not held up.
func (d *device) PostMany(recvs []verbs.RecvChain, sqi verbs.QP, sends []verbs.SendWR) (int, error) {
	m := &d.many
	m.mu.Lock()
	defer m.mu.Unlock()
	m.rq = m.rq[:0]
	for i := range recvs {
		recvs[i].Posted = 0
		q, ok := recvs[i].QP.(*qp)
		if !ok || q == nil || q.pd.dev != d {
			return 0, fmt.Errorf("%w: PostMany: receive chain %d is not for a QP of %s", verbs.ErrInvalidArgument, i, d.name)
		}
		for _, o := range m.rq {
			if o == q {
				return 0, fmt.Errorf("%w: PostMany: QP %v has two receive chains", verbs.ErrInvalidArgument, q.qpn)
			}
		}
		m.rq = append(m.rq, q)
	}
	var sq *qp
	if sqi != nil && len(sends) > 0 {
		var ok bool
		if sq, ok = sqi.(*qp); !ok || sq == nil || sq.pd.dev != d {
			return 0, fmt.Errorf("%w: PostMany: the send QP is not a QP of %s", verbs.ErrInvalidArgument, d.name)
		}
		sq.sendMu.Lock()
		defer sq.sendMu.Unlock()
	}
	m.qps, m.n = m.qps[:0], m.n[:0]
	var stop error
	for i, q := range m.rq {
		q.recvMu.Lock()
		defer q.recvMu.Unlock()
		n := 0
		if len(recvs[i].WRs) > 0 && stop == nil {
			n, stop = q.fillRecv(recvs[i].WRs)
		}
		m.qps = append(m.qps, q.q)
		m.n = append(m.n, C.int(n))
	}
	ns := 0
	if sq != nil && stop == nil {
		ns, stop = sq.fillSend(sends)
	}
	var csq *C.struct_seqd_qp
	if ns > 0 {
		csq = sq.q
	}
	var qpp **C.struct_seqd_qp
	var np *C.int
	if len(m.qps) > 0 {
		qpp, np = &m.qps[0], &m.n[0]
	}
	d.crossings.Add(1)
	var failed C.int
	rc := C.seqd_post_many(qpp, np, C.int(len(m.qps)), csq, C.int(ns), &failed)
	done := len(m.rq)
	if rc != 0 && int(failed) < len(m.rq) {
		done = int(failed)
	}
	for i := 0; i < done; i++ {
		recvs[i].Posted = int(m.n[i])
		m.rq[i].recordRecvs(recvs[i].WRs[:recvs[i].Posted])
	}
	switch {
	case rc != 0 && int(failed) < len(m.rq):
		q := m.rq[failed]
		bad := int(q.q.bad)
		recvs[failed].Posted = bad
		q.recordRecvs(recvs[failed].WRs[:bad])
		return 0, fmt.Errorf("ibv: ibv_post_recv on QP %v work request %d: %w", q.qpn, bad, postErr(rc))
	case rc != 0:
		bad := int(sq.q.bad)
		return bad, fmt.Errorf("ibv: ibv_post_send work request %d: %w", bad, postErr(rc))
	}
	return ns, stop
}
