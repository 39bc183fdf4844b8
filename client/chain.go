package client

import (
	"fmt"

	"github.com/seqd/seqd/admin/handshake"
	"github.com/seqd/seqd/verbs"
)

// sendChain is one QP's chain of send work requests being built (one
// doorbell when posted) and the counts selective signaling keeps: the
// work requests posted and those a signaled completion showed done. The
// transports that send requests on their own QPs (herd, fasst) embed it
// per QP. A work request's ID is its sequence number on the QP << 8 |
// the QP's index.
type sendChain struct {
	wrs    []verbs.SendWR
	sges   []verbs.SGE
	nwr    int
	posted uint64
	done   uint64
}

func newSendChain(n int) sendChain {
	return sendChain{wrs: make([]verbs.SendWR, n), sges: make([]verbs.SGE, n)}
}

func (c *sendChain) chain() *sendChain { return c }

// chained is a transport's per-QP state that embeds a sendChain.
type chained interface{ chain() *sendChain }

// add appends wr, gathering sge, to the chain of QP qi, with its ID, and
// signaled every signalEvery-th work request.
func (c *sendChain) add(qi int, signalEvery uint64, wr verbs.SendWR, sge verbs.SGE) {
	seq := c.posted + uint64(c.nwr)
	c.sges[c.nwr] = sge
	wr.ID = seq<<8 | uint64(qi)
	wr.SG = c.sges[c.nwr : c.nwr+1]
	if seq%signalEvery == signalEvery-1 {
		wr.Flags |= verbs.Signaled
	}
	c.wrs[c.nwr] = wr
	c.nwr++
}

// post posts the chain on qp: one doorbell, counted in st. While more
// than limit work requests would be outstanding it first reaps send
// completions (reap), as long as that finds any. Work requests not
// posted are the caller's to send again (on their timeout).
func (c *sendChain) post(qp verbs.QP, limit uint64, reap func() int, st *stats) error {
	if c.nwr == 0 {
		return nil
	}
	for c.posted-c.done+uint64(c.nwr) > limit {
		if reap() == 0 {
			break
		}
	}
	k := c.nwr
	n, err := qp.PostSend(c.wrs[:k])
	c.posted += uint64(n)
	c.nwr = 0
	st.doorbell(n)
	if err != nil {
		return fmt.Errorf("posted %d of %d requests: %w", n, k, err)
	}
	return nil
}

// reapSends polls cq for send completions into wcs and moves the done
// count of the QP each names; it returns how many it polled.
func reapSends[Q chained](cq verbs.CQ, wcs []verbs.WC, qs []Q) int {
	n, err := cq.Poll(wcs)
	if err != nil {
		return 0
	}
	for _, wc := range wcs[:n] {
		if qi := int(wc.ID & 0xff); qi < len(qs) {
			c := qs[qi].chain()
			if seq := wc.ID >> 8; seq+1 > c.done {
				c.done = seq + 1
			}
		}
	}
	return n
}

// endpointOf names qp for admission.
func endpointOf(qp verbs.QP) handshake.Endpoint {
	return handshake.Endpoint{Addr: qp.Address(), QPN: qp.QPN()}
}

// endpointsOf names, for admission, the QP qp(q) of each of a
// transport's qps.
func endpointsOf[Q any](qps []Q, qp func(Q) verbs.QP) []handshake.Endpoint {
	eps := make([]handshake.Endpoint, len(qps))
	for i, q := range qps {
		eps[i] = endpointOf(qp(q))
	}
	return eps
}

// closeAll closes each of rs that is not nil, in order (a transport's
// verbs resources, some perhaps never made).
func closeAll(rs ...interface{ Close() error }) {
	for _, r := range rs {
		if r != nil {
			r.Close()
		}
	}
}
