//go:build linux

package soft

import (
	"fmt"
	"sync/atomic"

	"github.com/seqd/seqd/verbs"
	"github.com/seqd/seqd/verbs/rocev2"
)

// The RC responder enforces an AtomicPolicy where a NIC cannot: the
// region's remote atomics are FETCH_AND_ADDs of one fixed add, each held
// back while the word is above a ceiling its owner moves.

var (
	_ verbs.AtomicPolicer = (*pd)(nil)
	_ verbs.AtomicMR      = (*mr)(nil)
)

// atomicPolicy is a region's verbs.AtomicPolicy and what it refused.
type atomicPolicy struct {
	add     uint64
	limit   atomic.Uint64
	refused atomic.Uint64
}

// RegAtomicMR implements verbs.AtomicPolicer.
func (p *pd) RegAtomicMR(length int, pol verbs.AtomicPolicy) (verbs.AtomicMR, error) {
	if pol.FetchAdd == 0 {
		return nil, fmt.Errorf("%w: an atomic policy's FetchAdd must not be 0", verbs.ErrInvalidArgument)
	}
	ap := &atomicPolicy{add: pol.FetchAdd}
	ap.limit.Store(pol.Limit)
	m, err := p.regMR(length, verbs.AccessLocalWrite|verbs.AccessRemoteAtomic, ap)
	if err != nil {
		return nil, err
	}
	return m, nil
}

// SetAtomicLimit implements verbs.AtomicMR. On a region registered
// without a policy it does nothing.
func (m *mr) SetAtomicLimit(limit uint64) {
	if m.policy != nil {
		m.policy.limit.Store(limit)
	}
}

// AtomicRefused implements verbs.AtomicMR.
func (m *mr) AtomicRefused() uint64 {
	if m.policy == nil {
		return 0
	}
	return m.policy.refused.Load()
}

// policyVerdict is what a policy makes of one remote atomic.
type policyVerdict uint8

const (
	policyRan     policyVerdict = iota // executed
	policyHeld                         // the word is above the limit: not now
	policyRefused                      // never: not the fetch-and-add allowed
)

// fetchAdd runs the atomic pk asks for on w under the policy and returns
// the word's value before it; a request held or refused changes nothing.
func (ap *atomicPolicy) fetchAdd(w *uint64, pk *rocev2.Packet) (orig uint64, v policyVerdict) {
	if pk.Opcode.Op() != rocev2.OpFetchAdd || pk.SwapAdd != ap.add {
		return 0, policyRefused
	}
	for {
		orig = atomic.LoadUint64(w)
		if orig+ap.add < orig {
			return 0, policyRefused // the word would wrap
		}
		if orig > ap.limit.Load() {
			return 0, policyHeld
		}
		if atomic.CompareAndSwapUint64(w, orig, orig+ap.add) {
			return orig, policyRan
		}
	}
}

// holdAtomic answers an atomic the policy's limit holds back: receiver
// not ready (RNR NAK), so that the requester sends it again after its RNR
// timer, by when the owner may have raised the limit. The requests that
// follow it are dropped without a sequence NAK, which would have the
// requester resend at once. Callers hold rqMu.
func (x *qp) holdAtomic() {
	x.d.ctr.rcNaks.Add(1)
	x.resp.nakSent = true
	x.sendAck(rocev2.AETHRNRNak|1, x.resp.epsn)
}

// refuseAtomic answers an atomic the region's policy refused as a NIC
// answers a protection violation: a remote access error NAK, and the QP
// moves to ERR, so that nothing the peer sends after it executes. Its
// posted RECVs are flushed here; its send queue when it is next modified
// or closed (the responder holds rqMu, which the requester's lock
// precedes). Callers hold rqMu.
func (x *qp) refuseAtomic(m *mr) {
	m.policy.refused.Add(1)
	x.d.ctr.atomicRefused.Add(1)
	x.nak(rocev2.AETHNakRemAcc)
	x.state.Store(uint32(verbs.StateErr))
	for x.rqN > 0 {
		s, _ := x.popRecv()
		x.recvCQ.push(&verbs.WC{ID: s.id, Status: verbs.WCWRFlushErr, Opcode: verbs.WCRecv, QPN: verbs.QPN(x.qpn)})
	}
}
