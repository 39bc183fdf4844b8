package client

import (
	"syscall"
	"testing"
	"time"

	"github.com/seqd/seqd/verbs"
)

// instantTransport answers, with increasing values, the requests it was
// sent before its previous poll: one poll's lag, as a network's round
// trip keeps requests in flight while their predecessors' answers come
// in. No network, no lock, no allocation: a benchmark on it measures the
// engine, the loop and the hand-offs alone. Only the goroutine driving
// the engine calls it.
type instantTransport struct {
	capacity int
	sent     []int // IDs sent and not yet polled, oldest first
	ripe     int   // sent[:ripe] were sent before the previous poll
	next     uint64
}

func newInstantTransport(capacity int) *instantTransport {
	return &instantTransport{capacity: capacity, sent: make([]int, 0, capacity), next: 1000}
}

func (f *instantTransport) Free() int        { return f.capacity - len(f.sent) }
func (f *instantTransport) Outstanding() int { return len(f.sent) }
func (f *instantTransport) Send(now time.Duration, ids []int) (int, error) {
	n := min(len(ids), f.capacity-len(f.sent))
	f.sent = append(f.sent, ids[:n]...)
	return n, nil
}

func (f *instantTransport) Poll(now time.Duration, res []result) int {
	k := min(len(res), f.ripe)
	for i, id := range f.sent[:k] {
		f.next++
		res[i] = result{ID: id, Value: f.next}
	}
	f.sent = f.sent[:copy(f.sent, f.sent[k:])]
	f.ripe = len(f.sent)
	return k
}

func (f *instantTransport) Expire(time.Duration) int            { return 0 }
func (f *instantTransport) NextDeadline() (time.Duration, bool) { return 0, false }
func (f *instantTransport) CQ() verbs.CQ                        { return fakeCQ{} }
func (f *instantTransport) Broken() bool                        { return false }
func (f *instantTransport) Cancel(id int) {
	for i, s := range f.sent {
		if s == id {
			f.sent = append(f.sent[:i], f.sent[i+1:]...)
			if i < f.ripe {
				f.ripe--
			}
			return
		}
	}
}
func (f *instantTransport) Close() error { return nil }

// startOverhead runs an engine on an instantTransport of capacity w,
// with no admin plane: a reconnect (a thread descheduled past
// reconnectAfter on a loaded machine) is put off for good.
func startOverhead(b *testing.B, w int) *Client {
	c := startEngine(b, newInstantTransport(w))
	c.drive.Lock() // the engine idles: nothing was submitted
	c.eng.reconnAt = 1 << 62
	c.drive.Unlock()
	return c
}

// BenchmarkPipelinedOverhead is the client library's own cost per
// pipelined call, W = 128 outstanding, on a transport that answers at
// once (no network, no syscall): "done" completes each request on its
// Done channel to a caller goroutine that submits it again (as
// BenchmarkPipelined does), "callback" submits it again from its Callback
// on the goroutine driving the engine (as loadgen does). cpu_ns/op is the
// process's CPU time per call.
func BenchmarkPipelinedOverhead(b *testing.B) {
	const w = 128
	b.Run("done", func(b *testing.B) {
		c := startOverhead(b, w)
		done := make(chan *Request, w)
		reqs := make([]Request, w)
		b.ReportAllocs()
		b.ResetTimer()
		cpu := cpuSelf()
		issued, inflight := 0, 0
		for i := range reqs {
			if issued == b.N {
				break
			}
			reqs[i].Done = done
			if err := c.Submit(&reqs[i]); err != nil {
				b.Fatal(err)
			}
			issued++
			inflight++
		}
		for inflight > 0 {
			r := <-done
			inflight--
			if r.Err != nil {
				b.Fatal(r.Err)
			}
			if issued < b.N {
				if err := c.Submit(r); err != nil {
					b.Fatal(err)
				}
				issued++
				inflight++
			}
		}
		b.StopTimer()
		b.ReportMetric(float64(cpuSelf()-cpu)/float64(b.N), "cpu_ns/op")
	})
	b.Run("callback", func(b *testing.B) {
		c := startOverhead(b, w)
		reqs := make([]Request, w)
		left := make(chan struct{})
		issued, inflight := 0, 0 // touched by the callbacks only, once started
		var failed error
		cb := func(r *Request) {
			inflight--
			if r.Err != nil && failed == nil {
				failed = r.Err
			}
			if issued < b.N && failed == nil {
				if err := c.Submit(r); err == nil {
					issued++
					inflight++
				}
			}
			if inflight == 0 {
				close(left)
			}
		}
		b.ReportAllocs()
		b.ResetTimer()
		cpu := cpuSelf()
		c.drive.Lock() // no callback runs before every slot is submitted
		for i := range reqs {
			if issued == b.N {
				break
			}
			reqs[i].Callback = cb
			if err := c.Submit(&reqs[i]); err != nil {
				b.Fatal(err)
			}
			issued++
			inflight++
		}
		c.drive.Unlock()
		<-left
		b.StopTimer()
		if failed != nil {
			b.Fatal(failed)
		}
		b.ReportMetric(float64(cpuSelf()-cpu)/float64(b.N), "cpu_ns/op")
	})
}

// cpuSelf is the CPU time (user + system) the process used so far (0
// where getrusage fails).
func cpuSelf() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
