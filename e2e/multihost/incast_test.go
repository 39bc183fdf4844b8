package multihost

import (
	"cmp"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seqd/seqd/internal/netnstest"
)

// incastHosts is how many client hosts share an incast's clients.
const incastHosts = 4

// TestERPCIncast is the thesis's incast experiment (Table 6.4) on the
// rig: N clients of mode erpc (4 calls in flight each) on incastHosts
// hosts send to one seqd (one worker) whose link is a bottleneck, a tc
// tbf at the switch's port to it (SEQD_RIG_INCAST_MBIT Mbit/s, default
// 20, queueing up to 50 ms), with congestion control off and then on
// (loadgen -erpc-cc, the clients' link rate given as the bottleneck's:
// an incast's senders have links as fast as the receiver's), and a
// latency probe on the first host: one more client, one call at a time,
// without congestion control, so that its calls see the queue the incast
// leaves at the bottleneck. For N in SEQD_RIG_INCAST_CLIENTS (default
// 20,50,100) it prints a RIG incast line: the clients' p50 and p99 call
// latency (the median over the hosts' loadgen runs; with CC on it
// includes the wait in their own rate limiters), the probe's p50 and
// p99, the throughput, the retransmissions, and what went through the
// bottleneck and what it dropped. Every loadgen run must exit 0 with its
// calls verified (unique, each above those returned before it began);
// what the numbers show is not asserted: an experiment, run by
// scripts/bench-erpc.sh (PARTS=incast) with SEQD_RIG_INCAST=1, and
// skipped otherwise.
func TestERPCIncast(t *testing.T) {
	if os.Getenv("SEQD_RIG_INCAST") == "" {
		t.Skip("an experiment, not a check (up to 100 clients on this host's cores): SEQD_RIG_INCAST=1, " +
			"as scripts/bench-erpc.sh PARTS=incast runs it")
	}
	mbit := cmp.Or(os.Getenv("SEQD_RIG_INCAST_MBIT"), "20")
	if v, err := strconv.ParseFloat(mbit, 64); err != nil || v <= 0 {
		t.Fatalf("SEQD_RIG_INCAST_MBIT: %q is not a rate in Mbit/s", mbit)
	}
	rate := mbit + "mbit"
	var counts []int
	for _, f := range strings.Split(cmp.Or(os.Getenv("SEQD_RIG_INCAST_CLIENTS"), "20,50,100"), ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < incastHosts {
			t.Fatalf("SEQD_RIG_INCAST_CLIENTS: %q is not a count of at least %d", f, incastHosts)
		}
		counts = append(counts, n)
	}
	duration := cmp.Or(os.Getenv("SEQD_RIG_INCAST_DURATION"), "5s")

	rig := netnstest.New(t)
	srv := rig.AddHost("srv")
	var hosts []*netnstest.Host
	for i := range incastHosts {
		hosts = append(hosts, rig.AddHost(fmt.Sprintf("c%d", i)))
	}
	if err := rig.Shape(srv, "tbf", "rate", rate, "burst", "4kb", "latency", "50ms"); err != nil {
		t.Fatal(err)
	}
	admin := srv.HostPort(7070)
	start(t, srv, bin(t, "seqd"), append([]string{"-mode", "erpc", "-workers", "1", "-admin", admin,
		"-device", srv.HostPort(4791), "-metrics", "off", "-data", t.TempDir(), "-admin-insecure-no-auth"}, newDeployment(t)...)...)
	waitFor(t, 20*time.Second, "seqd on "+srv.Name, func() bool {
		_, _, code := run(t, 5*time.Second, hosts[0], bin(t, "seqctl"), "-admin", admin, "-insecure", "-timeout", "1s", "health")
		return code == 0
	})
	lg := bin(t, "loadgen")
	common := []string{"-admin", admin, "-insecure", "-modes", "erpc", "-duration", duration, "-warmup", "1s", "-echo", "-1s"}
	for _, n := range counts {
		for _, cc := range []bool{false, true} {
			var flags []string
			if cc {
				// The clients' link is the bottleneck's rate, as an incast's
				// senders have links as fast as the receiver's.
				flags = []string{"-erpc-cc", "-erpc-link-rate", mbit}
			}
			before, err := rig.Stats(srv)
			if err != nil {
				t.Fatal(err)
			}
			// The load: n clients over the hosts, 4 calls in flight each,
			// and the probe, all at once.
			type job struct {
				h    *netnstest.Host
				args []string
			}
			var jobs []job
			for i, h := range hosts {
				k := n / incastHosts
				if i < n%incastHosts {
					k++
				}
				jobs = append(jobs, job{h, append(append([]string{"-clients", strconv.Itoa(k), "-window", "4"}, common...), flags...)})
			}
			// The probe never paces itself: its calls see the queue at
			// the bottleneck that the incast leaves.
			jobs = append(jobs, job{hosts[0], append([]string{"-clients", "1", "-window", "1"}, common...)})
			res := make([]lgResult, len(jobs))
			errs := make([]error, len(jobs))
			var wg sync.WaitGroup
			for i, j := range jobs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					res[i], errs[i] = loadgenOne(lg, j.h, j.args...)
				}()
			}
			wg.Wait()
			for i, err := range errs {
				if err != nil {
					t.Fatalf("clients=%d cc=%v: loadgen on %s: %v", n, cc, jobs[i].h.Name, err)
				}
			}
			after, err := rig.Stats(srv)
			if err != nil {
				t.Fatal(err)
			}
			load := res[:incastHosts]
			probe := res[incastHosts]
			var ops float64
			for _, r := range res {
				ops += r.ThroughputOps
			}
			sent, dropped := qdiscDelta(before, after)
			t.Logf("RIG incast clients=%d cc=%v bottleneck=%s p50_us=%.0f p99_us=%.0f probe_p50_us=%.0f probe_p99_us=%.0f Mops=%.3f retransmits=%d through_pkts=%d dropped_pkts=%d",
				n, cc, rate, median(load, func(r lgResult) float64 { return r.P50us }), median(load, func(r lgResult) float64 { return r.P99us }),
				probe.P50us, probe.P99us, ops/1e6, sumRetransmits(res), sent, dropped)
		}
	}
}

func median(rs []lgResult, f func(lgResult) float64) float64 {
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = f(r)
	}
	sort.Float64s(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

func sumRetransmits(rs []lgResult) (n uint64) {
	for _, r := range rs {
		n += r.Retransmits
	}
	return n
}

var qdiscCounters = regexp.MustCompile(`Sent \d+ bytes (\d+) pkt \(dropped (\d+),`)

// qdiscDelta is what the qdisc sent and dropped between two of its
// `tc -s qdisc show` outputs.
func qdiscDelta(before, after string) (sent, dropped uint64) {
	read := func(s string) (uint64, uint64) {
		m := qdiscCounters.FindStringSubmatch(s)
		if m == nil {
			return 0, 0
		}
		a, _ := strconv.ParseUint(m[1], 10, 64)
		b, _ := strconv.ParseUint(m[2], 10, 64)
		return a, b
	}
	s0, d0 := read(before)
	s1, d1 := read(after)
	return s1 - s0, d1 - d0
}
