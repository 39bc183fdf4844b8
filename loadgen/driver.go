package loadgen

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/seqd/seqd/client"
	"github.com/seqd/seqd/loadgen/verify"
)

// Latencies are recorded in nanoseconds, 1 ns to 60 s, 3 significant
// digits.
const (
	histMin = 1
	histMax = int64(60 * time.Second)
	histSig = 3
)

// driver keeps one client's window full. Everything it owns except stop
// and inflight is touched only by the client's engine goroutine (through
// the slots' callbacks) until drained is closed.
type driver struct {
	c     *client.Client
	base  time.Time
	from  int64 // measured interval [from, until), ns since base
	until int64
	slots []slot

	hist     *hdrhistogram.Histogram
	count    uint64 // answers that returned inside [from, until)
	errs     uint64
	firstErr error
	minTS    uint64
	maxTS    uint64

	verify     bool
	pool       *chunkPool
	cur        []verify.Call   // the chunk being filled
	full       [][]verify.Call // filled chunks, in order
	kept       int             // calls recorded
	maxRecs    int             // beyond this, answers are counted as unverified
	grew       int             // chunks the pool had to allocate
	unverified uint64

	stop     atomic.Bool
	inflight atomic.Int64
	drained  chan struct{}
}

// slot is one outstanding request: a caller-owned client.Request that is
// resubmitted from its own callback.
type slot struct {
	d     *driver
	start int64
	req   client.Request
}

func newDriver(c *client.Client, window int, base time.Time, from, until int64, pool *chunkPool, maxRecs int, verifyOn bool) *driver {
	d := &driver{c: c, base: base, from: from, until: until, slots: make([]slot, window),
		hist: hdrhistogram.New(histMin, histMax, histSig), verify: verifyOn, pool: pool, maxRecs: maxRecs,
		minTS: ^uint64(0), drained: make(chan struct{})}
	for i := range d.slots {
		s := &d.slots[i]
		s.d = d
		s.req.Callback = s.done // one method value per slot, made once
	}
	return d
}

func (d *driver) now() int64 { return int64(time.Since(d.base)) }

// start submits every slot once.
func (d *driver) start() error {
	d.inflight.Store(int64(len(d.slots)))
	for i := range d.slots {
		s := &d.slots[i]
		s.start = d.now()
		if err := d.c.Submit(&s.req); err != nil {
			d.inflight.Add(int64(i - len(d.slots)))
			if d.inflight.Load() == 0 {
				close(d.drained)
			}
			return fmt.Errorf("loadgen: submit: %w", err)
		}
	}
	return nil
}

// done is the hot path: it runs on the client's engine goroutine for every
// answer, records it, and submits the request again. It allocates nothing
// unless the record buffer estimate was short.
func (s *slot) done(r *client.Request) {
	d := s.d
	now := d.now()
	if r.Err != nil {
		d.errs++
		if d.firstErr == nil {
			d.firstErr = r.Err
		}
	} else {
		v := uint64(r.TS)
		if d.verify {
			d.record(verify.Call{Start: time.Duration(s.start), End: time.Duration(now), Value: v})
		}
		d.minTS = min(d.minTS, v)
		d.maxTS = max(d.maxTS, v)
		if now >= d.from && now < d.until {
			d.count++
			d.hist.RecordValue(now - s.start)
		}
	}
	if now >= d.until || d.stop.Load() {
		if d.inflight.Add(-1) == 0 {
			close(d.drained)
		}
		return
	}
	// The next call is issued after this one returned: its start is later
	// than this end, as the real-time check requires (it is strict).
	s.start = now + 1
	if err := d.c.Submit(r); err != nil {
		d.errs++
		if d.firstErr == nil {
			d.firstErr = err
		}
		if d.inflight.Add(-1) == 0 {
			close(d.drained)
		}
	}
}

// record keeps c for verification.
func (d *driver) record(c verify.Call) {
	if d.kept >= d.maxRecs {
		d.unverified++
		return
	}
	if len(d.cur) == cap(d.cur) {
		if d.cur != nil {
			d.full = append(d.full, d.cur) // amortized: once per chunkCalls
		}
		var fresh bool
		d.cur, fresh = d.pool.get() // allocates only if the pool ran dry
		if fresh {
			d.grew++
		}
	}
	d.cur = append(d.cur, c)
	d.kept++
}

// calls returns the recorded calls, in chunks.
func (d *driver) calls() [][]verify.Call {
	if len(d.cur) > 0 {
		d.full = append(d.full, d.cur)
		d.cur = nil
	}
	return d.full
}

// wait waits until every slot has returned for the last time.
func (d *driver) wait(ctx context.Context) error {
	select {
	case <-d.drained:
		return nil
	case <-ctx.Done():
		d.stop.Store(true)
		return fmt.Errorf("loadgen: %d requests still outstanding: %w", d.inflight.Load(), ctx.Err())
	}
}
