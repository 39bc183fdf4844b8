package headeronly

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/seqd/seqd/verbs"
)

// recvQ is a request QP and the receive buffers posted to it: one of a
// session's own (one per client QP, sized by its window) or, with
// Config.SharedRecv, the worker's shared one. Its receives complete on the
// worker's request CQ; the worker re-posts each buffer to the QP its
// completion came from, so one client can use up only its own receives.
//
// Lifecycle: Connect creates the QP, posts its first receives and hands
// it to the worker (rqInbox.adopt); from then on only the worker touches
// it. Disconnect hands it back (rqInbox.retire). The worker, between
// batches, moves it to the error state, which flushes its receives into
// flush completions; it destroys the QP and its buffers only once every
// receive it posted has completed, so no completion of it can still be in
// the CQ (a provider or NIC that reuses its QPN at once cannot mistake
// one for the new QP's). WR IDs carry the recvQ's serial as a second
// check.
type recvQ struct {
	qp     verbs.QP
	qpn    verbs.QPN
	mr     verbs.MR
	base   uint64 // mr.Addr() and mr.LKey(), read once: set runs per request
	lkey   uint32
	serial uint64 // unique per server; WR IDs are serial<<32 | slot
	// peer is the one client QP whose requests it takes (a session's
	// own queue); nil: any client QP of its worker's (the shared one).
	// Set before the worker adopts it.
	peer   *peer
	size   int // receives kept posted (shared: updated from worker.want)
	free   []uint32
	posted int
	wrs    []verbs.RecvWR
	sges   []verbs.SGE
	nre    int // re-posts gathered in the current batch
	// The worker's last peer lookup for a completion of this queue: the
	// peer table it was made in, the sender and the result. The table is
	// copy-on-write, so while it is the same the result is too: a queue's
	// requests come from one client QP (or, shared, in runs from one).
	lookTab  *peerTable
	lookFrom verbs.Sender
	lookPeer *peer
	dying    bool // worker-owned: retired, in the error state; destroyed once posted is 0
}

var rqSerial atomic.Uint64

// newRecvQ registers slots receive buffers and makes room for WRs work
// requests of them at once.
func newRecvQ(pd verbs.PD, qp verbs.QP, size, slots, wrs int) (*recvQ, error) {
	mr, err := pd.RegMR(slots*recvSlot, verbs.AccessLocalWrite)
	if err != nil {
		return nil, fmt.Errorf("receive buffers: %w", err)
	}
	q := &recvQ{qp: qp, qpn: qp.QPN(), mr: mr, base: mr.Addr(), lkey: mr.LKey(), serial: rqSerial.Add(1) & 0xffffffff, size: size,
		free: make([]uint32, slots), wrs: make([]verbs.RecvWR, wrs), sges: make([]verbs.SGE, wrs)}
	for i := range q.free {
		q.free[i] = uint32(slots - 1 - i)
	}
	for i := range q.wrs {
		q.wrs[i].SG = q.sges[i : i+1]
	}
	return q, nil
}

// fill posts receives until size are posted, as one chain.
func (q *recvQ) fill() error {
	n := 0
	for q.posted+n < q.size && len(q.free) > 0 && n < len(q.wrs) {
		slot := q.free[len(q.free)-1]
		q.free = q.free[:len(q.free)-1]
		q.set(n, slot)
		n++
	}
	return q.post(n)
}

func (q *recvQ) set(i int, slot uint32) {
	q.wrs[i].ID = q.serial<<32 | uint64(slot)
	q.sges[i] = verbs.SGE{Addr: q.base + uint64(slot)*recvSlot, Length: recvSlot, LKey: q.lkey}
}

// post posts the first n prepared receives; those refused go back to the
// free list.
func (q *recvQ) post(n int) error {
	if n == 0 {
		return nil
	}
	done, err := q.qp.PostRecv(q.wrs[:n])
	q.posted += done
	for i := done; i < n; i++ {
		q.free = append(q.free, uint32(q.wrs[i].ID))
	}
	if err != nil {
		return fmt.Errorf("post %d receives on QP %v: %w", n, q.qpn, err)
	}
	return nil
}

// reposted accounts for the re-post of the nre receives gathered in this
// batch, done of which were posted (the rest go back to the free list).
func (q *recvQ) reposted(done int) error {
	n := q.nre
	q.nre = 0
	q.posted += done
	for i := done; i < n; i++ {
		q.free = append(q.free, uint32(q.wrs[i].ID))
	}
	if done < n {
		return fmt.Errorf("re-posted %d of %d receives on QP %v", done, n, q.qpn)
	}
	return nil
}

// completed takes back the buffer of a completion of q: gathered for
// re-posting if fewer than size stay posted, else freed. It reports
// whether q was not yet gathered in this batch.
func (q *recvQ) completed(id uint64) (first bool) {
	q.posted--
	slot := uint32(id)
	if q.dying || q.posted+q.nre >= q.size {
		q.free = append(q.free, slot)
		return false
	}
	q.set(q.nre, slot)
	q.nre++
	return q.nre == 1
}

// close destroys the QP, then its buffers.
func (q *recvQ) close() {
	q.qp.Close()
	q.mr.Close()
}

// noRecvDrops is how many requests q's QP dropped for want of a posted
// receive, if the provider counts it per QP.
func (q *recvQ) noRecvDrops() (n uint64, ok bool) {
	c, ok := q.qp.(verbs.Counters)
	if !ok {
		return 0, false
	}
	c.VisitCounters(func(name string, v uint64) {
		if name == verbs.CounterDropNoRecv {
			n = v
		}
	})
	return n, true
}

// rqInbox carries receive queues between the admin plane and a worker.
// The worker looks at it once per loop (one atomic load) and takes it at
// a batch boundary.
type rqInbox struct {
	pending atomic.Bool
	mu      sync.Mutex
	adopt   []*recvQ
	retire  []*recvQ
}

func (b *rqInbox) add(adopt, retire []*recvQ) {
	b.mu.Lock()
	b.adopt = append(b.adopt, adopt...)
	b.retire = append(b.retire, retire...)
	b.pending.Store(true)
	b.mu.Unlock()
}
