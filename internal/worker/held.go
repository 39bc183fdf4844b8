package worker

import (
	"fmt"

	"github.com/seqd/seqd/admin/handshake"
	"github.com/seqd/seqd/dataplane"
)

// Held is which session holds each client QP, for a mode whose server
// QPs connect to the client's (RC, UC): a client QP connects to one
// server QP, so it belongs to one session at a time.
type Held map[handshake.Endpoint]uint64

// Check refuses qps when one is named twice (an error wrapping
// dataplane.ErrInvalidArgument) or is held by a session other than
// replacing (dataplane.ErrFailedPrecondition).
func (h Held) Check(qps []handshake.Endpoint, replacing uint64) error {
	for i, q := range qps {
		for _, p := range qps[:i] {
			if p == q {
				return fmt.Errorf("%w: qps[%d]: QP %v at %v named twice", dataplane.ErrInvalidArgument, i, q.QPN, q.Addr)
			}
		}
		if s, ok := h[q]; ok && s != replacing {
			return fmt.Errorf("%w: QP %v at %v is already connected", dataplane.ErrFailedPrecondition, q.QPN, q.Addr)
		}
	}
	return nil
}

// Add records qps as session id's.
func (h Held) Add(qps []handshake.Endpoint, id uint64) {
	for _, q := range qps {
		h[q] = id
	}
}

// Remove forgets those of qps session id holds.
func (h Held) Remove(qps []handshake.Endpoint, id uint64) {
	for _, q := range qps {
		if h[q] == id {
			delete(h, q)
		}
	}
}
