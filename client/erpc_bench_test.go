package client

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/seqd/seqd/admin/adminclient"
	"github.com/seqd/seqd/admin/adminpb"
	"github.com/seqd/seqd/loadgen/verify"
	"github.com/seqd/seqd/server"
	"github.com/seqd/seqd/spec"
)

// The experiments of issue 30 (thesis chapter 6) that need the eRPC
// transport's insides: Table 6.3 (loss) and the Timely rate histogram
// (no false congestion). scripts/bench-erpc.sh runs them next to the
// latency table (Table 6.1, BenchmarkGetTimestamp against a seqd in mode
// erpc, in spec-s0 and a raw UDP ping-pong) and prints every figure as a
// ratio to its reference from the same run. None asserts a time.

// erpcLossPoints are Table 6.3's loss rates, each injected by the soft
// provider on every transmit of seqd and of the client (both
// directions), plus eRPC's own 30 % test, each between two lossless
// references ("loss=0/refN"): on a shared machine the speed changes from
// second to second, and the ratio of a loss rate's throughput to the
// mean of its two neighbours compares like with like (A-B-A).
var erpcLossPoints = func() (ps []lossPoint) {
	for i, l := range []float64{1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 0.3} {
		ps = append(ps, lossPoint{fmt.Sprintf("loss=0/ref%d", i), 0}, lossPoint{fmt.Sprintf("loss=%g", l), l})
	}
	return append(ps, lossPoint{"loss=0/ref6", 0})
}()

type lossPoint struct {
	name string
	loss float64
}

// faultOpts is the soft provider's option string for loss (none for 0),
// with its own seed per side.
func faultOpts(loss float64, seed int) string {
	if loss == 0 {
		return ""
	}
	return fmt.Sprintf("loss=%g,seed=%d", loss, seed)
}

// BenchmarkERPCLoss is Table 6.3 over the soft provider: for each loss
// rate a seqd in mode erpc (one worker) and a client of 2 sessions of 8
// credits, both dropping that fraction of the packets they send, serve
// b.N GetTimestamp calls kept erpcLossWindow outstanding. It reports
// Mops, the calls' p50/p99/p999 (µs, from Submit to completion), the
// client's retransmissions per call (go-back-N resends of the RTO,
// spec.ERPCDefaultRTO) and per 1,000 calls, and fails on any violation:
// every call is recorded in a verify.History (each value unique, and
// above every value returned before its call began) and the transport
// counts answers that repeated a request number with another value
// (at-most-once, verify's kind Reanswered), which must stay 0. The
// server's side of at-most-once is checked too: the values it served
// (its admin Status) over the run are at most the calls; a handler run
// again for a retransmission whose first answer was lost would claim
// more, and no client would see a second value. The throughput ratio to
// the lossless reference is the script's.
func BenchmarkERPCLoss(b *testing.B) {
	for i, p := range erpcLossPoints {
		a, stop := startStoppable(b, server.Config{Mode: spec.ModeERPC, Workers: 1, ProviderOpts: faultOpts(p.loss, 100+i)})
		c := dialT(b, a.Admin, WithQPs(2), WithWindow(spec.ERPCDefaultCredits),
			WithDevice("soft", "127.0.0.1:0", faultOpts(p.loss, 200+i)))
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		cc, err := adminclient.Dial(ctx, a.Admin)
		cancel()
		if err != nil {
			b.Fatal(err)
		}
		b.Run(p.name, func(b *testing.B) { benchLoss(b, c, adminpb.NewAdminClient(cc)) })
		cc.Close()
		c.Close()
		stop()
	}
}

// served is the values a seqd served, from its admin Status.
func served(b *testing.B, adm adminpb.AdminClient) uint64 {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := adm.Status(ctx, &adminpb.StatusRequest{})
	if err != nil {
		b.Fatal(err)
	}
	return st.GetServed()
}

// erpcLossWindow is the calls BenchmarkERPCLoss keeps outstanding: the
// two sessions' 16 credits, twice over (a caller waits for a free slot).
const erpcLossWindow = 32

func benchLoss(b *testing.B, c *Client, adm adminpb.AdminClient) {
	if c.Mode() != spec.ModeERPC {
		b.Fatalf("mode %q", c.Mode())
	}
	// A worker counts a burst just after its doorbell: the previous
	// run's last answers may be counted late. Wait a moment for them.
	srv0 := served(b, adm)
	for range 100 {
		time.Sleep(time.Millisecond)
		if s := served(b, adm); s != srv0 {
			srv0 = s
			continue
		}
		break
	}
	reanswered := func() uint64 {
		c.drive.Lock()
		defer c.drive.Unlock()
		if tr, ok := c.eng.tr.(*erpcTransport); ok {
			return tr.Reanswered()
		}
		return 0
	}
	st0, re0 := c.Stats(), reanswered()
	var hist verify.History
	lat := hdrhistogram.New(1, int64(10*time.Second), 3)
	t0 := time.Now()
	pipeline(b, c, erpcLossWindow, func(caller int, start, end time.Time, v uint64) {
		lat.RecordValue(min(end.Sub(start).Nanoseconds(), int64(10*time.Second)))
		hist.Record(caller, verify.Call{Start: start.Sub(t0), End: end.Sub(t0), Value: v})
	})
	el := b.Elapsed()
	st, re := c.Stats(), reanswered()
	r := hist.Check()
	r.Reanswered = int(re - re0)
	if !r.OK() || r.Calls != b.N {
		b.Fatalf("%d calls recorded of %d: %v", r.Calls, b.N, r.Err())
	}
	if st.Regressions != st0.Regressions || st.Timeouts != st0.Timeouts {
		b.Fatalf("regressions %d, timeouts %d", st.Regressions-st0.Regressions, st.Timeouts-st0.Timeouts)
	}
	// The server's count may lag its answers (see above): give it a
	// moment to reach the calls; served beyond them is the violation.
	srv := served(b, adm) - srv0
	for deadline := time.Now().Add(time.Second); srv < uint64(b.N) && time.Now().Before(deadline); srv = served(b, adm) - srv0 {
		time.Sleep(time.Millisecond)
	}
	if srv > uint64(b.N) {
		b.Fatalf("the server served %d values for %d calls: a retransmission ran again", srv, b.N)
	}
	n := float64(b.N)
	b.ReportMetric(n/el.Seconds()/1e6, "Mops")
	b.ReportMetric(float64(lat.ValueAtQuantile(50))/1e3, "p50_us")
	b.ReportMetric(float64(lat.ValueAtQuantile(99))/1e3, "p99_us")
	b.ReportMetric(float64(lat.ValueAtQuantile(99.9))/1e3, "p999_us")
	b.ReportMetric(float64(st.Retransmits-st0.Retransmits), "retx")
	b.ReportMetric(float64(st.Retransmits-st0.Retransmits)/n*1000, "retx/kcall")
	b.ReportMetric(float64(r.Violations()), "violations")
	b.ReportMetric(float64(srv)/n, "srv_values/call")
}

// pipeline runs b.N GetTimestamp calls through c with w outstanding
// (reusable Requests, each one caller whose calls follow one another),
// timing b's loop, and hands each completed call to done. A failed
// call fails b.
func pipeline(b *testing.B, c *Client, w int, done func(caller int, start, end time.Time, v uint64)) {
	ch := make(chan *Request, w)
	reqs := make([]Request, w)
	starts := make([]time.Time, w)
	index := make(map[*Request]int, w)
	for i := range reqs {
		reqs[i].Done = ch
		index[&reqs[i]] = i
	}
	issued, inflight := 0, 0
	b.ResetTimer()
	for i := range reqs {
		if issued == b.N {
			break
		}
		starts[i] = time.Now()
		if err := c.Submit(&reqs[i]); err != nil {
			b.Fatal(err)
		}
		issued++
		inflight++
	}
	for inflight > 0 {
		r := <-ch
		end := time.Now()
		inflight--
		if r.Err != nil {
			b.Fatal(r.Err)
		}
		i := index[r]
		done(i, starts[i], end, uint64(r.TS))
		if issued < b.N {
			starts[i] = time.Now()
			if err := c.Submit(r); err != nil {
				b.Fatal(err)
			}
			issued++
			inflight++
		}
	}
	b.StopTimer()
}

// BenchmarkERPCTimely is the no-false-congestion experiment: the eRPC
// transport against an erpc server (2 workers) over loopback, no
// bottleneck, b.N calls, "cc=off" the reference and "cc=on" running
// Timely and the rate limiter (WithCongestionControl). "pipelined": 2
// sessions of 8 credits kept full as the engine drives them (drive);
// "serial": one session, one call at a time (Table 6.1's client). Mops
// is each one's throughput (the script reports on over off, same run).
// With cc=on it reports what Timely saw and did (reportTimely): its RTT
// samples (answers not retransmitted), those the T_low bypass skipped,
// the updates run, the samples of T_low (spec.TimelyTLow, scaled) or
// more, the samples that lowered a session's rate (lowered), the lowest
// rate (a fraction of line rate), and the histogram of the samples by
// the rate they left: the share at line rate, in [½, 1), [1/10, ½),
// [1/100, 1/10) and below 1/100 of it (spec.RateBuckets). It asserts
// nothing about them: on this VM a preempted thread or a queue of
// pipelined requests makes RTTs of T_low and more, which Timely takes
// for congestion.
func BenchmarkERPCTimely(b *testing.B) {
	for _, serial := range []bool{false, true} {
		load := "pipelined"
		if serial {
			load = "serial"
		}
		b.Run(load+"/cc=off", func(b *testing.B) { benchTimely(b, serial, false) })
		b.Run(load+"/cc=on", func(b *testing.B) { benchTimely(b, serial, true) })
	}
}

// BenchmarkERPCFactors is the client's side of the thesis's factor
// analysis (Table 6.2): the pipelined load of BenchmarkERPCTimely (2
// sessions of 8 credits kept full, against an erpc server of 2 workers
// on loopback) with congestion control off (the reference), on, and on
// with each of its optimizations turned off in turn: the clock read
// once per engine step (batched_clock), Timely's T_low bypass, and the
// wheel bypass of uncongested sessions. scripts/bench-erpc.sh (PARTS
// factors) reports each as a ratio to cc=on, same round.
func BenchmarkERPCFactors(b *testing.B) {
	for _, c := range []struct {
		name string
		cc   bool
		off  erpcFactors
	}{
		{"cc=off", false, erpcFactors{}},
		{"cc=off/batched_clock=off", false, erpcFactors{batchedClock: true}},
		{"cc=on", true, erpcFactors{}},
		{"cc=on/batched_clock=off", true, erpcFactors{batchedClock: true}},
		{"cc=on/timely_bypass=off", true, erpcFactors{timelyBypass: true}},
		{"cc=on/wheel_bypass=off", true, erpcFactors{wheelBypass: true}},
	} {
		b.Run(c.name, func(b *testing.B) {
			r := newERPCRig(b, "", "", 2, 8)
			r.tr.cc, r.tr.off = c.cc, c.off
			r.tr.off.clock = r.now
			for _, q := range r.tr.qps {
				q.tl.NoBypass = c.off.timelyBypass
			}
			b.ResetTimer()
			vs := drive(b, r.tr, r.st, b.N, r.now)
			b.StopTimer()
			checkUnique(b, vs)
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds()/1e6, "Mops")
			if c.cc {
				c := r.tr.congestion()
				b.ReportMetric(float64(c.Updates)/float64(max(c.Updates+c.Bypassed, 1)), "updated_frac")
			}
		})
	}
}

// timelyUnits name spec.RateBuckets in the benchmarks' reports.
var timelyUnits = [len(spec.RateBuckets)]string{"rate_line_%", "rate_50-100_%", "rate_10-50_%", "rate_1-10_%", "rate_lt1_%"}

func benchTimely(b *testing.B, serial, cc bool) {
	qps := 2
	if serial {
		qps = 1
	}
	r := newERPCRig(b, "", "", qps, 8)
	r.tr.cc = cc
	b.ResetTimer()
	var vs []uint64
	if serial {
		vs = driveSerial(b, r.tr, r.now)
	} else {
		vs = drive(b, r.tr, r.st, b.N, r.now)
	}
	b.StopTimer()
	checkUnique(b, vs)
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds()/1e6, "Mops")
	if cc {
		reportTimely(b, r.tr.congestion())
	}
}

// reportTimely reports what Timely saw and did (BenchmarkERPCTimely).
func reportTimely(b *testing.B, c spec.Timely) {
	samples := c.Updates + c.Bypassed
	b.ReportMetric(float64(samples), "samples")
	b.ReportMetric(float64(c.Bypassed), "bypassed")
	b.ReportMetric(float64(c.Updates), "updates")
	b.ReportMetric(float64(c.Above), "above_Tlow")
	b.ReportMetric(float64(c.Lowered), "lowered")
	b.ReportMetric(c.MinRate/spec.TimelyLinkRate, "min_rate_frac")
	for k, n := range c.Rates {
		b.ReportMetric(100*float64(n)/float64(max(samples, 1)), timelyUnits[k])
	}
}

// BenchmarkERPCTimelyProcs is BenchmarkERPCTimely's pipelined load with
// the server in a process of its own, SEQD_BENCH_ADMIN (a seqd in mode
// erpc; scripts/bench-erpc.sh starts one with one worker pinned to core
// 1, and runs this on core 0): the experiment as eRPC ran it, client and
// server on cores of their own, where in one process they share the
// cores (and the garbage collector), and the server's scheduling delays
// come into every RTT. 16 callers on 2 sessions (WithQPs(2)) for b.N
// calls; the same reports.
func BenchmarkERPCTimelyProcs(b *testing.B) {
	addr := os.Getenv("SEQD_BENCH_ADMIN")
	if addr == "" {
		b.Skip("needs a seqd in mode erpc in another process: SEQD_BENCH_ADMIN (scripts/bench-erpc.sh, PARTS=timely)")
	}
	for _, cc := range []bool{false, true} {
		b.Run(fmt.Sprintf("cc=%s", map[bool]string{false: "off", true: "on"}[cc]), func(b *testing.B) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			c, err := Dial(ctx, addr, WithQPs(2), WithCongestionControl(cc))
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			const callers = 16
			var next atomic.Int64
			var wg sync.WaitGroup
			errs := make(chan error, callers)
			b.ResetTimer()
			for range callers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for next.Add(1) <= int64(b.N) {
						if _, err := c.GetTimestamp(ctx); err != nil {
							errs <- err
							return
						}
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			close(errs)
			if err := <-errs; err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds()/1e6, "Mops")
			tr, ok := c.eng.tr.(*erpcTransport)
			if !ok {
				b.Fatalf("the seqd at %s does not run mode erpc (transport %T)", addr, c.eng.tr)
			}
			// Every call has returned: no answer is left to sample.
			if cc {
				reportTimely(b, tr.congestion())
			}
		})
	}
}

// driveSerial runs b.N requests through tr one at a time, as a lone
// caller's GetTimestamp does, and returns their values; each must be
// above the one before. A request answered with an error (a
// retransmission given up) is sent again.
func driveSerial(b *testing.B, tr transport, clock func() time.Duration) []uint64 {
	b.Helper()
	ids := []int{0}
	res := make([]result, 64)
	out := make([]uint64, 0, b.N)
	var last uint64
	deadline := time.Now().Add(20 * time.Second)
	for len(out) < b.N {
		if n, err := tr.Send(clock(), ids); n != 1 || err != nil {
			b.Fatalf("Send: %d, %v", n, err)
		}
		for answered := false; !answered; {
			if time.Now().After(deadline) || tr.Broken() {
				b.Fatalf("%d of %d answered before the deadline (broken %v)", len(out), b.N, tr.Broken())
			}
			now := clock()
			for _, x := range res[:tr.Poll(now, res)] {
				answered = true
				if x.Err != nil {
					continue // sent again below
				}
				if x.Value <= last {
					b.Fatalf("value %d after %d", x.Value, last)
				}
				last = x.Value
				out = append(out, x.Value)
			}
			tr.Expire(now)
			if f, ok := tr.(flusher); ok {
				f.Flush()
			}
		}
	}
	return out
}
