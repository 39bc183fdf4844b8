//go:build linux

package soft

import (
	"testing"

	"github.com/seqd/seqd/verbs"
)

// TestQueueAttr: QPInitAttr.Queue puts a QP on the queue it names (mod
// the device's queues), on a device whose queues have ports of their own
// and on one whose queues share the RoCEv2 port (where the QPN steers:
// the QPN then lands on the queue asked for); 0 leaves the round robin.
func TestQueueAttr(t *testing.T) {
	for _, dev := range []string{"127.0.0.1:0", "127.0.0.3:4791"} {
		t.Run(dev, func(t *testing.T) {
			d, err := Open(dev, verbs.Options{"queues": "3"})
			if err != nil {
				t.Skipf("open %s: %v", dev, err)
			}
			defer d.Close()
			pd, _ := d.AllocPD()
			defer pd.Close()
			cq, _ := d.CreateCQ(16)
			defer cq.Close()
			for _, want := range []int{2, 1, 3, 3, 5, 1} {
				q, err := pd.CreateQP(verbs.QPInitAttr{Type: verbs.UD, SendCQ: cq, RecvCQ: cq, Queue: want,
					Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1}})
				if err != nil {
					t.Fatal(err)
				}
				defer q.Close()
				x := q.(*qp)
				if got := x.q.idx; got != (want-1)%3 {
					t.Errorf("Queue %d: on queue %d, want %d", want, got, (want-1)%3)
				}
				if x.d.shared && int(x.qpn)%3 != (want-1)%3 {
					t.Errorf("Queue %d: QPN %d is steered to queue %d", want, x.qpn, x.qpn%3)
				}
			}
		})
	}
}
