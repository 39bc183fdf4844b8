package ha_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seqd/seqd/ha"
	"github.com/seqd/seqd/ha/hatest"
	"github.com/seqd/seqd/loadgen/verify"
)

// Fast failover (the serving lease, doc.go): a standby deposes a leader
// whose heartbeat stopped, long before etcd expires the leader's lease.
// The tests here check that it happens and that it is safe; how long it
// takes is logged (distributions over trials), not asserted.

// trials is how many times each fault is repeated: SEQD_TEST_FAILOVER_TRIALS,
// default 3 (20 to measure).
func trials(t testing.TB) int {
	if s := os.Getenv("SEQD_TEST_FAILOVER_TRIALS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("SEQD_TEST_FAILOVER_TRIALS=%q: want a positive integer", s)
		}
		return n
	}
	return 3
}

// served is one successful call and who answered it.
type served struct {
	from       string
	start, end time.Duration
	value      uint64
}

// servedLoad is load that remembers which instance answered each call.
type servedLoad struct {
	*load
	mu    sync.Mutex
	calls []served
}

// startServedLoad starts callers that, like load's, prefer the instance
// that answered them last.
func startServedLoad(insts []*inst, callers int) *servedLoad {
	s := &servedLoad{load: &load{insts: insts, base: time.Now(), stop: make(chan struct{}), froms: map[string]int{}}}
	for id := range callers {
		s.wg.Add(1)
		go s.caller(id)
	}
	return s
}

func (s *servedLoad) caller(id int) {
	defer s.wg.Done()
	sticky := 0
	for {
		start := s.now()
		for got := false; !got; {
			select {
			case <-s.stop:
				return
			default:
			}
			for k := range s.insts {
				i := (sticky + k) % len(s.insts)
				o := s.insts[i].orc.Load()
				if o == nil {
					continue
				}
				v, err := o.Claim(1)
				if err != nil {
					continue
				}
				end := s.now()
				s.v.Record(id, verify.Call{Start: start, End: end, Value: v})
				s.mu.Lock()
				s.calls = append(s.calls, served{from: s.insts[i].name, start: start, end: end, value: v})
				s.mu.Unlock()
				s.load.mu.Lock()
				s.succ = append(s.succ, end)
				s.froms[s.insts[i].name]++
				s.load.mu.Unlock()
				sticky, got = i, true
				break
			}
			if !got {
				time.Sleep(200 * time.Microsecond)
			}
		}
		time.Sleep(300 * time.Microsecond)
	}
}

// handover finds, after the fault at, the first call answered by another
// instance than old (the new leader's first value) and counts the calls
// old answered that started after it had ended: calls no real-time order
// allows (the old leader served after its successor did).
func (s *servedLoad) handover(old string, at time.Duration) (first served, ok bool, violations int) {
	s.mu.Lock()
	calls := slices.Clone(s.calls)
	s.mu.Unlock()
	for _, c := range calls {
		if c.from != old && c.end > at && (!ok || c.end < first.end) {
			first, ok = c, true
		}
	}
	for _, c := range calls {
		if ok && c.from == old && c.start > first.end {
			violations++
		}
	}
	return first, ok, violations
}

// quantiles returns the p50 and p99 of ds (nearest rank).
func quantiles(ds []time.Duration) (p50, p99, worst time.Duration) {
	if len(ds) == 0 {
		return 0, 0, 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := func(q float64) time.Duration {
		i := int(q*float64(len(s))+0.999999) - 1
		return s[min(max(i, 0), len(s)-1)]
	}
	return rank(0.50), rank(0.99), s[len(s)-1]
}

func logDistribution(t testing.TB, fault string, ds []time.Duration) {
	p50, p99, worst := quantiles(ds)
	rounded := make([]time.Duration, len(ds))
	for i, d := range ds {
		rounded[i] = d.Round(time.Millisecond)
	}
	t.Logf("FAILOVER fault=%s trials=%d p50=%v p99=%v max=%v all=%v", fault, len(ds),
		p50.Round(time.Millisecond), p99.Round(time.Millisecond), worst.Round(time.Millisecond), rounded)
}

// TestStandbyDeposesSilentLeader: a leader that dies without revoking its
// lease is replaced while etcd still holds that lease (a 10 s TTL here):
// the standbys do not wait for etcd to expire it. The dead leader's lease
// is read from its election key before the crash and asked about after
// the new leader serves.
func TestStandbyDeposesSilentLeader(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a real etcd cluster; skipped in -short")
	}
	c := hatest.Start(t, 3)
	const longTTL = 10 * time.Second
	var insts []*inst
	for i := range 3 {
		insts = append(insts, startInst(t, c.Endpoints(), "/deposes", fmt.Sprintf("seqd-%d", i), longTTL))
	}
	lead := leader(t, insts, 10*time.Second)
	cli := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, "/deposes/election/", clientv3.WithFirstCreate()...)
	if err != nil || len(resp.Kvs) == 0 || string(resp.Kvs[0].Value) != lead.name {
		t.Fatalf("the leader's election key: %v %v", resp, err)
	}
	leaseID := clientv3.LeaseID(resp.Kvs[0].Lease)
	l := startLoad(insts, 4)
	l.waitCalls(t, 100, 10*time.Second)
	at := time.Now()
	lead.crash()
	next := leader(t, others(insts, lead), 3*longTTL)
	took := time.Since(at)
	l.waitCalls(t, 100, 10*time.Second)
	l.finish(t)
	ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ttlResp, err := cli.TimeToLive(ctx, leaseID)
	if err != nil {
		t.Fatalf("TimeToLive of the dead leader's lease: %v", err)
	}
	t.Logf("%s took over from %s %v after the crash; the dead leader's lease had %ds left", next.name, lead.name,
		took.Round(time.Millisecond), ttlResp.TTL)
	if ttlResp.TTL <= 0 {
		t.Fatalf("the new leader took over only after etcd expired the dead leader's lease (TTL %ds): failover waited for the lease", longTTL/time.Second)
	}
}

// TestFastFailover repeats two faults on a fresh group each time, under
// load from callers that keep asking the instance that answered them
// last: the leader crashes (serves nothing more, cannot revoke its lease)
// or is cut off from etcd (keeps serving whoever still asks it, until its
// serving lease runs out). Every trial checks the calls with the verifier
// and that no call the old leader answered started after the new
// leader's first value; the time from the fault to that first value is
// logged as a distribution (SEQD_TEST_FAILOVER_TRIALS trials per fault).
func TestFastFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a real etcd cluster; skipped in -short")
	}
	c := hatest.Start(t, 3)
	n := trials(t)
	for _, fault := range []string{"crash", "partition"} {
		t.Run(fault, func(t *testing.T) {
			var ds []time.Duration
			for i := range n {
				prefix := fmt.Sprintf("/%s-%d", t.Name(), i)
				var insts []*inst
				for j := range 3 {
					insts = append(insts, startInst(t, c.Endpoints(), prefix, fmt.Sprintf("seqd-%d", j), ttl))
				}
				lead := leader(t, insts, failoverWithin)
				l := startServedLoad(insts, 4)
				l.waitCalls(t, 200, failoverWithin)
				at := l.now()
				if fault == "crash" {
					lead.crash()
				} else {
					lead.partition()
				}
				leader(t, others(insts, lead), failoverWithin)
				l.waitCalls(t, 200, failoverWithin)
				l.finish(t)
				first, ok, violations := l.handover(lead.name, at)
				if !ok {
					t.Fatalf("trial %d: no value from a new leader", i)
				}
				if violations != 0 {
					t.Fatalf("trial %d: the old leader %s answered %d calls that started after the new leader's first value (%v at %v)",
						i, lead.name, violations, first.value, first.end)
				}
				ds = append(ds, first.end-at)
				for _, in := range insts {
					in.stop()
				}
			}
			logDistribution(t, "in-process-"+fault, ds)
		})
	}
}

// TestSlowEtcdKeepsLeader: when etcd itself stalls (every member paused
// for three takeover waits), the leader's heartbeats stop reaching it
// and its gate closes by itself, but no standby deposes it: a standby
// deposes only after etcd committed a write of its own promptly
// (Node.etcdPrompt). Once etcd resumes, the same term serves again, and
// keeps serving.
func TestSlowEtcdKeepsLeader(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a real etcd cluster; skipped in -short")
	}
	c := hatest.Start(t, 3)
	var insts []*inst
	for i := range 3 {
		insts = append(insts, startInst(t, c.Endpoints(), "/slowetcd", fmt.Sprintf("seqd-%d", i), 10*time.Second))
	}
	lead := leader(t, insts, 10*time.Second)
	term := lead.n.Term()
	wait := ha.Config{Beat: ha.DefaultBeat, ServeLease: ha.DefaultServeLease}.TakeoverAfter()
	// The standbys have seen the term's heartbeats: a deposition needs one.
	time.Sleep(wait)
	for i := range 3 {
		c.Pause(i)
	}
	time.Sleep(3 * wait) // the fault: etcd answers nothing
	for i := range 3 {
		c.Resume(i)
	}
	deadline := time.Now().Add(10 * time.Second)
	for lead.n.Term() == nil && time.Now().Before(deadline) {
		if l := leaderOrNil(insts); l != nil && l != lead {
			t.Fatalf("%s deposed: %s leads after etcd stalled", lead.name, l.name)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if got := lead.n.Term(); got != term {
		t.Fatalf("after etcd stalled, %s's term is %v, was %v: it was deposed (logs: %s)", lead.name, got, term, c.Logs())
	}
	// Two takeover waits more: a standby that saw the heartbeat stop
	// during the stall has waited it out.
	for end := time.Now().Add(2 * wait); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if l := leaderOrNil(insts); l != nil && l != lead {
			t.Fatalf("%s leads %v after etcd resumed: %s was deposed", l.name, 2*wait-time.Until(end), lead.name)
		}
		if got := lead.n.Term(); got != nil && got != term {
			t.Fatalf("%s's term changed %v after etcd resumed", lead.name, 2*wait-time.Until(end))
		}
	}
}

// leaderOrNil is the one instance whose term serves, or nil.
func leaderOrNil(insts []*inst) *inst {
	var l *inst
	for _, in := range insts {
		if in.n.Term() != nil {
			if l != nil {
				return nil
			}
			l = in
		}
	}
	return l
}
