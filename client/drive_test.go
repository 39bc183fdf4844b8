package client

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seqd/seqd/verbs"
)

// seqTransport serves every request sent to it with the next value of one
// counter, once delay has passed since it was sent; unless mute, which
// answers nothing. It records the IDs in flight, to catch an engine that
// reuses one, and counts the goroutines polling it at once, to catch two
// drivers.
type seqTransport struct {
	mu       sync.Mutex
	capacity int
	delay    time.Duration
	mute     bool
	next     uint64
	sentAt   map[int]time.Duration
	badID    bool
	pollers  atomic.Int32
	twoPoll  atomic.Bool
}

func newSeqTransport(capacity int, delay time.Duration) *seqTransport {
	return &seqTransport{capacity: capacity, delay: delay, next: 1000, sentAt: map[int]time.Duration{}}
}

func (f *seqTransport) enter() func() {
	if f.pollers.Add(1) > 1 {
		f.twoPoll.Store(true)
	}
	return func() { f.pollers.Add(-1) }
}

func (f *seqTransport) Free() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.capacity - len(f.sentAt)
}

func (f *seqTransport) Outstanding() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.sentAt)
}

func (f *seqTransport) Send(now time.Duration, ids []int) (int, error) {
	defer f.enter()()
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, id := range ids {
		if _, dup := f.sentAt[id]; dup || id >= f.capacity {
			f.badID = true
			return i, nil
		}
		f.sentAt[id] = now
	}
	return len(ids), nil
}

func (f *seqTransport) Poll(now time.Duration, res []result) int {
	defer f.enter()()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.mute {
		return 0
	}
	k := 0
	for id, at := range f.sentAt {
		if k == len(res) {
			break
		}
		if now-at < f.delay {
			continue
		}
		f.next++
		res[k] = result{ID: id, Value: f.next}
		delete(f.sentAt, id)
		k++
	}
	return k
}

func (f *seqTransport) Expire(time.Duration) int { return 0 }
func (f *seqTransport) NextDeadline() (time.Duration, bool) {
	return 0, false
}
func (f *seqTransport) CQ() verbs.CQ { return fakeCQ{} }
func (f *seqTransport) Broken() bool { return false }
func (f *seqTransport) Cancel(id int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.sentAt, id)
}
func (f *seqTransport) Close() error { return nil }

func (f *seqTransport) check(t testing.TB) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.badID {
		t.Error("the engine sent an ID in flight or out of range")
	}
	if f.twoPoll.Load() {
		t.Error("two goroutines drove the transport at once")
	}
}

// TestLoneCallerDrives: serial calls on an idle engine are driven by the
// caller itself (driveOwn), not handed to the engine goroutine.
func TestLoneCallerDrives(t *testing.T) {
	tr := newSeqTransport(4, 0)
	c := startEngine(t, tr)
	ctx := context.Background()
	const n = 1000
	last := Timestamp(0)
	for range n {
		ts, err := c.GetTimestamp(ctx)
		if err != nil || ts <= last {
			t.Fatalf("call = %d, %v after %d", ts, err, last)
		}
		last = ts
	}
	if d := c.st.driven.Load(); d < n/2 {
		t.Fatalf("%d of %d serial calls drove the engine themselves", d, n)
	}
	tr.check(t)
}

// TestDriveConcurrent: many callers at once, some alone and driving the
// engine, some handing off to it, some giving up on a short deadline,
// with answers that come at once or only after the driver blocked. Every
// value handed out is unique, each caller's values increase, no ID is
// reused while in flight and the transport never has two drivers.
func TestDriveConcurrent(t *testing.T) {
	for _, delay := range []time.Duration{0, 40 * time.Microsecond, 3 * time.Millisecond} {
		t.Run(delay.String(), func(t *testing.T) {
			tr := newSeqTransport(8, delay)
			c := startEngine(t, tr)
			const callers, calls = 6, 150
			var mu sync.Mutex
			seen := map[Timestamp]bool{}
			var wg sync.WaitGroup
			var timeouts atomic.Int64
			for g := range callers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					last := Timestamp(0)
					for i := range calls {
						ctx, cancel := context.Background(), context.CancelFunc(func() {})
						if (g+i)%7 == 0 {
							ctx, cancel = context.WithTimeout(ctx, delay/2+time.Microsecond)
						}
						before := c.maxRet.Load()
						ts, err := c.GetTimestamp(ctx)
						cancel()
						if err != nil {
							if errors.Is(err, ErrTimeout) || errors.Is(err, context.DeadlineExceeded) {
								timeouts.Add(1)
								continue
							}
							t.Errorf("caller %d call %d: %v", g, i, err)
							return
						}
						if ts <= last || uint64(ts) <= before {
							t.Errorf("caller %d: %d after %d (max returned before the call %d)", g, ts, last, before)
						}
						last = ts
						mu.Lock()
						if seen[ts] {
							t.Errorf("value %d handed out twice", ts)
						}
						seen[ts] = true
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			t.Logf("%d values, %d timeouts, %d calls drove the engine", len(seen), timeouts.Load(), c.st.driven.Load())
			tr.check(t)
			if len(seen) == 0 {
				t.Fatal("no call succeeded")
			}
		})
	}
}

// TestDriveCancel: a caller driving the engine gives up when its ctx is
// done, and the client goes on serving (the engine recycles the request).
func TestDriveCancel(t *testing.T) {
	tr := newSeqTransport(2, 0)
	tr.mute = true
	c := startEngine(t, tr)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(5*time.Millisecond, cancel)
	if _, err := c.GetTimestamp(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	tr.mu.Lock()
	tr.mute = false
	tr.mu.Unlock()
	if ts, err := c.GetTimestamp(context.Background()); err != nil || ts == 0 {
		t.Fatalf("call after a cancelled one = %d, %v", ts, err)
	}
	tr.check(t)
}

// TestDriveClose: Close while a caller drives the engine, blocked for an
// answer that never comes, fails that call with ErrNotConnected.
func TestDriveClose(t *testing.T) {
	tr := newSeqTransport(2, 0)
	tr.mute = true
	c := startEngine(t, tr)
	errc := make(chan error, 1)
	go func() {
		_, err := c.GetTimestamp(context.Background())
		errc <- err
	}()
	for c.st.requests.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	c.sub.mu.Lock()
	c.sub.closed = true
	c.sub.mu.Unlock()
	c.stop()
	if err := <-errc; !errors.Is(err, ErrNotConnected) {
		t.Fatalf("err = %v, want ErrNotConnected", err)
	}
	if _, err := c.GetTimestamp(context.Background()); !errors.Is(err, ErrNotConnected) {
		t.Fatalf("call after Close: %v, want ErrNotConnected", err)
	}
	tr.check(t)
}

// BenchmarkEngineOverhead is the client library's own cost per serial
// call, on a transport that answers at once (no network): "lone" is
// GetTimestamp driving the engine itself (driveOwn), "handoff" the same
// request handed to the engine goroutine and waited for (Submit, then
// the Done channel), as every call went before the lone-caller path.
func BenchmarkEngineOverhead(b *testing.B) {
	b.Run("lone", func(b *testing.B) {
		c := startEngine(b, newSeqTransport(4, 0))
		ctx := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			if _, err := c.GetTimestamp(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("handoff", func(b *testing.B) {
		c := startEngine(b, newSeqTransport(4, 0))
		r := &Request{Done: make(chan *Request, 1)}
		b.ReportAllocs()
		for b.Loop() {
			if err := c.Submit(r); err != nil {
				b.Fatal(err)
			}
			<-r.Done
			if r.Err != nil {
				b.Fatal(r.Err)
			}
		}
	})
}
