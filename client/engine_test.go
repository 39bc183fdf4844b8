package client

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seqd/seqd/verbs"
)

// fakeCQ is a CQ that never completes anything: the engine's Wait
// returns when it is kicked, its timer fires or the client closes.
type fakeCQ struct{}

func (fakeCQ) Poll([]verbs.WC) (int, error) { return 0, nil }
func (fakeCQ) Wait(ctx context.Context) error {
	<-ctx.Done()
	return ctx.Err()
}
func (fakeCQ) Close() error { return nil }

// fakeTransport answers the requests it was sent, in order, with the
// values of answers; past the end it answers no more. A 0 in answers
// fails the request on the wire once, then answers its resend 1<<40.
type fakeTransport struct {
	mu        sync.Mutex
	capacity  int
	inflight  map[int]bool
	sent      []int // IDs in the order sent
	cancelled []int
	answers   []uint64
	failed    bool
	badID     bool
}

func (f *fakeTransport) Free() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.capacity - len(f.inflight)
}

func (f *fakeTransport) Outstanding() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.inflight)
}

func (f *fakeTransport) Send(now time.Duration, ids []int) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, id := range ids {
		if f.inflight[id] || id >= f.capacity {
			f.badID = true // the engine reused an ID in flight, or made one up
			return i, nil
		}
		f.inflight[id] = true
		f.sent = append(f.sent, id)
	}
	return len(ids), nil
}
func (f *fakeTransport) Poll(now time.Duration, res []result) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := 0
	for _, id := range f.sent {
		if k == len(res) || len(f.answers) == 0 || !f.inflight[id] {
			continue
		}
		v := f.answers[0]
		if v == 0 && !f.failed { // fail once on the wire, answer the resend
			f.failed = true
			delete(f.inflight, id)
			res[k] = result{ID: id, Err: errors.New("wire")}
			k++
			continue
		}
		f.answers = f.answers[1:]
		if v == 0 {
			v = 1 << 40
		}
		delete(f.inflight, id)
		res[k] = result{ID: id, Value: v}
		k++
	}
	return k
}
func (f *fakeTransport) Expire(time.Duration) int            { return 0 }
func (f *fakeTransport) NextDeadline() (time.Duration, bool) { return 0, false }
func (f *fakeTransport) CQ() verbs.CQ                        { return fakeCQ{} }
func (f *fakeTransport) Broken() bool                        { return false }
func (f *fakeTransport) Cancel(id int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.inflight, id)
	f.cancelled = append(f.cancelled, id)
}
func (f *fakeTransport) Close() error { return nil }

// startEngine runs a Client's engine on tr alone (no admin plane).
func startEngine(t testing.TB, tr transport) *Client {
	t.Helper()
	c := &Client{start: time.Now(), doneCh: make(chan struct{}), log: slog.New(slog.DiscardHandler)}
	c.sub.wakeCh = make(chan struct{}, 1)
	if err := c.opts.validate(); err != nil {
		t.Fatal(err)
	}
	c.pool.New = func() any { return &Request{Done: make(chan *Request, 1), pooled: true} }
	c.initEngine()
	c.eng.use(tr, "")
	c.ctx, c.stop = context.WithCancel(context.Background())
	c.newKick()
	c.run()
	t.Cleanup(func() {
		c.stop()
		<-c.doneCh
		if f, ok := tr.(*fakeTransport); ok && f.badID {
			t.Error("the engine sent an ID in flight or out of range")
		}
	})
	return c
}

// TestEngineAccept: the engine hands out a transport's value only when
// it is above every value returned before the call began; a lower one
// fails the call with ErrRegression, whatever the mode.
func TestEngineAccept(t *testing.T) {
	tr := &fakeTransport{capacity: 4, inflight: map[int]bool{}, answers: []uint64{100, 50, 101}}
	c := startEngine(t, tr)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if ts, err := c.GetTimestamp(ctx); err != nil || ts != 100 {
		t.Fatalf("first call = %d, %v; want 100", ts, err)
	}
	if ts, err := c.GetTimestamp(ctx); !errors.Is(err, ErrRegression) {
		t.Fatalf("second call (answered 50 after 100) = %d, %v; want ErrRegression", ts, err)
	}
	if ts, err := c.GetTimestamp(ctx); err != nil || ts != 101 {
		t.Fatalf("third call = %d, %v; want 101", ts, err)
	}
	if st := c.Stats(); st.Regressions != 1 || st.Answers != 2 {
		t.Fatalf("stats %+v: want 1 regression, 2 answers", st)
	}
}

// TestEngineResendsFailed: a result that failed on the wire is sent
// again (under a free ID) and its answer returned.
func TestEngineResendsFailed(t *testing.T) {
	tr := &fakeTransport{capacity: 2, inflight: map[int]bool{}, answers: []uint64{0}}
	c := startEngine(t, tr)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if ts, err := c.GetTimestamp(ctx); err != nil || ts != 1<<40 {
		t.Fatalf("call = %d, %v; want %d after one resend", ts, err, uint64(1<<40))
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if len(tr.sent) != 2 || c.Stats().Retransmits != 1 {
		t.Fatalf("sent %v, stats %+v: want the request sent twice, one retransmission", tr.sent, c.Stats())
	}
}

// TestEngineCancelsAtDeadline: a request never answered fails at its
// deadline with ErrTimeout, and the transport is told to drop it (its ID
// is free again).
func TestEngineCancelsAtDeadline(t *testing.T) {
	tr := &fakeTransport{capacity: 1, inflight: map[int]bool{}}
	c := startEngine(t, tr)
	r := &Request{Deadline: time.Now().Add(20 * time.Millisecond), Done: make(chan *Request, 1)}
	if err := c.Submit(r); err != nil {
		t.Fatal(err)
	}
	select {
	case <-r.Done:
	case <-time.After(10 * time.Second):
		t.Fatal("the request never failed")
	}
	if !errors.Is(r.Err, ErrTimeout) {
		t.Fatalf("err = %v, want ErrTimeout", r.Err)
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if len(tr.cancelled) != 1 || len(tr.inflight) != 0 {
		t.Fatalf("cancelled %v, in flight %v: want the request dropped", tr.cancelled, tr.inflight)
	}
}

// TestProbeSpacing: Status probes that find the session alive while no
// answer comes are spaced from each probe's end, the gap doubling from
// reconnectAfter up to maxProbeGap (the probe blocks the data path while
// it runs); an answer resets the spacing.
func TestProbeSpacing(t *testing.T) {
	var e engine
	var maxRet atomic.Uint64
	e.init(engineEnv{st: &stats{}, maxRet: &maxRet, log: slog.New(slog.DiscardHandler), defTimeout: time.Hour})
	f := &fakeTransport{capacity: 4, inflight: map[int]bool{}}
	e.use(f, "")
	r := &Request{Done: make(chan *Request, 1)}
	e.takeIn(r, 0)
	e.dispatch(0)
	if f.Outstanding() != 1 {
		t.Fatalf("%d outstanding", f.Outstanding())
	}
	now := reconnectAfter + time.Millisecond
	if due, force := e.reconnectDue(now, false); !due || force {
		t.Fatalf("no probe after %v without an answer", now)
	}
	end := now + 300*time.Millisecond // a slow probe, found the session alive
	for _, gap := range []time.Duration{50, 100, 200, 400, 500, 500} {
		gap *= time.Millisecond
		e.probedAlive(end)
		if due, _ := e.reconnectDue(end+gap, false); due {
			t.Fatalf("a probe %v after the last one ended, want %v", gap, gap)
		}
		if due, _ := e.reconnectDue(end+gap+time.Millisecond, false); !due {
			t.Fatalf("no probe %v after the last one ended", gap+time.Millisecond)
		}
		end += gap + 2*time.Millisecond
	}
	f.mu.Lock()
	f.answers = []uint64{7}
	f.mu.Unlock()
	e.step(end)
	if got := <-r.Done; got.TS != 7 || got.Err != nil {
		t.Fatalf("answer %v %v", got.TS, got.Err)
	}
	r2 := &Request{Done: make(chan *Request, 1)}
	e.takeIn(r2, end)
	e.dispatch(end)
	if due, _ := e.reconnectDue(end+reconnectAfter+time.Millisecond, false); !due {
		t.Fatal("the spacing outlived the answer")
	}
}

// TestElectingBackoffCap: reconnects that an HA group turned away while
// electing (a redirect) retry within maxRetryElecting however many
// failed; others back off up to maxRetryConnect.
func TestElectingBackoffCap(t *testing.T) {
	for _, electing := range []bool{true, false} {
		var e engine
		var maxRet atomic.Uint64
		e.init(engineEnv{st: &stats{}, maxRet: &maxRet, log: slog.New(slog.DiscardHandler), defTimeout: time.Hour})
		e.use(&fakeTransport{capacity: 1, inflight: map[int]bool{}}, "")
		var most time.Duration
		for range 20 {
			e.connectFailed(0, 0.999, electing)
			most = max(most, e.retryAfter)
		}
		want := maxRetryConnect
		if electing {
			want = maxRetryElecting
		}
		if most > want || most < want*9/10 {
			t.Fatalf("electing %v: longest pause %v, want up to %v", electing, most, want)
		}
	}
}
