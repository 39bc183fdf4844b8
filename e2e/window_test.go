package e2e

import (
	"context"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seqd/seqd/admin/adminpb"
	"github.com/seqd/seqd/admin/admintest"
	"github.com/seqd/seqd/loadgen/verify"
	"github.com/seqd/seqd/server"
	"github.com/seqd/seqd/verbs"
)

// TestWindowFlood (issue 12, windows enforced): an admitted client QP
// granted a window of 4 sends bursts of 512 times its window (more than a
// worker's shared receive queue of windows plus RecvSlack), far beyond
// it, from a raw UDP socket, while two well-behaved clients run (each
// burst as soon as a worker has answered from the one before, within
// floodPace: as fast as the server takes them fresh). The
// server answers at most the window of that QP's requests at a time and
// drops the excess: by the provider on the flooder's own request QP,
// which holds just its window of receives (rx_drop_no_recv), or, with a
// receive queue shared per worker, under reason "window". Every call of
// the well-behaved clients succeeds and passes the verifier.
//
// And the flood uses up only its own receives: no receive queue that a
// well-behaved client's requests land in ever found no receive posted.
// Each client QP has a request QP of its own, sized by its window
// (headeronly.Config.SharedRecv false); seqd_headeronly_sessions_overrun
// counts the connected sessions whose own QPs dropped a request for want
// of a receive, and once the flooder has disconnected it must be 0. A
// server without that gauge (one receive queue per worker, shared by its
// clients) is judged by the device's rx_drop_no_recv: every one of its
// receive queues serves well-behaved clients too.
func TestWindowFlood(t *testing.T) {
	if noRecv, perSession := windowFlood(t, startWithMetrics(t)); !perSession && noRecv > 0 {
		t.Fatalf("%s +%d on receive queues shared with the well-behaved clients: the flood used up receives they need",
			verbs.CounterDropNoRecv, noRecv)
	}
}

// windowFlood is TestWindowFlood against the seqd at addrs (metrics
// served). With per-session request QPs (perSession) it checks that no
// well-behaved session's QPs ran dry; otherwise it returns the
// provider's rx_drop_no_recv during the flood, on receive queues that
// the well-behaved clients share with the flooder, for the caller to
// judge.
func windowFlood(t *testing.T, addrs server.Addrs) (noRecv uint64, perSession bool) {
	const floodPace = 10 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	adm := admintest.Client(ctx, t, addrs.Admin)

	h := newHostile(ctx, t, adm)
	cs := dialN(t, ctx, addrs.Admin, "", 2)
	const burstWindows = 512
	_, flood := h.prebuild(nil, burstWindows*h.window)
	before, dropsBefore := providerCounters(ctx, t, adm), dropReasons(t, addrs.Metrics)
	rcvbuf := udpRcvbufErrors()

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var sent, bursts uint64
	wg.Add(1)
	go func() { // a burst of burstWindows windows every millisecond, paced
		defer wg.Done()
		burst := burstWindows * h.window
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for j := 0; ; j++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			bursts++
			answered := h.answers.Load()
			for k := range burst {
				if _, err := h.conn.WriteToUDPAddrPort(flood[(j*burst+k)%len(flood)], h.dst); err == nil {
					sent++
				}
			}
			// The next burst waits until a worker has answered from the
			// flood since this one began (it reached the flood while
			// requests were fresh), for floodPace at most. Unpaced, a
			// server slower than the sender (the race detector, a loaded
			// machine) only ever reaches requests that waited in the
			// socket buffer past spec.MaxResidence: every one is dropped
			// as expired before its window is looked at, and the
			// well-behaved clients' requests wait there past their
			// retransmission timeout, so their retransmissions overlap
			// the originals. Either hides what this test is about.
			for deadline := time.Now().Add(floodPace); h.answers.Load() == answered && time.Now().Before(deadline); {
				select {
				case <-stop:
					return
				case <-time.After(100 * time.Microsecond):
				}
			}
		}
	}()
	var v verify.History
	n, err := timedLoad(ctx, cs, 8, 1500*time.Millisecond, time.Now(), &v)
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatalf("a well-behaved client's call failed under the flood: %v", err)
	}
	if err := v.Check().Err(); err != nil {
		t.Fatal(err)
	}
	var retrans uint64
	for i, c := range cs {
		s := c.Stats()
		if s.Regressions != 0 || s.Timeouts != 0 {
			t.Errorf("client %d: %+v", i, s)
		}
		retrans += s.Retransmits
	}
	// Wait until every flood request is accounted for (answered, or
	// dropped by the provider or by seqd), or the counts stop moving (the
	// kernel may have dropped some from a full socket buffer).
	var after, dropsAfter map[string]uint64
	var last uint64
	accounted := func() uint64 {
		var d uint64
		for _, r := range []string{"window", "expired", "late", "unknown_source"} {
			d += dropsAfter[r] - dropsBefore[r]
		}
		return h.answers.Load() + d + after[verbs.CounterDropNoRecv] - before[verbs.CounterDropNoRecv]
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		after, dropsAfter = providerCounters(ctx, t, adm), dropReasons(t, addrs.Metrics)
		a := accounted()
		if a >= sent || a == last || time.Now().After(deadline) {
			break
		}
		last = a
	}
	rcvbuf = udpRcvbufErrors() - rcvbuf
	windowDrops := dropsAfter["window"] - dropsBefore["window"]
	noRecv = after[verbs.CounterDropNoRecv] - before[verbs.CounterDropNoRecv]
	t.Logf("well-behaved: %d calls, %d retransmissions; flood: %d requests in %d bursts, %d answered, %d dropped for the window, %d expired; %s +%d; kernel UDP receive-buffer drops (whole host) +%d",
		n, retrans, sent, bursts, h.answers.Load(), windowDrops, dropsAfter["expired"]-dropsBefore["expired"], verbs.CounterDropNoRecv, noRecv, rcvbuf)
	if windowDrops+noRecv == 0 {
		t.Errorf("none of %d requests sent in bursts of %d (window %d) was dropped for the window", sent, burstWindows*h.window, h.window)
	}
	if a := h.answers.Load(); a > sent-windowDrops-min(noRecv, sent-windowDrops) {
		t.Errorf("%d flood requests answered, more than the %d not dropped for the window (%d by seqd, %d for want of a receive)", a, sent-windowDrops-min(noRecv, sent-windowDrops), windowDrops, noRecv)
	}

	// No well-behaved client's receive queue ran dry.
	overrun, perSession := gauge(t, addrs.Metrics, "seqd_headeronly_sessions_overrun")
	if !perSession {
		t.Logf("well-behaved clients' retransmissions: %d", retrans)
		return noRecv, false
	}
	t.Logf("sessions overrun while the flooder is connected: %v", overrun)
	if _, err := adm.Disconnect(ctx, &adminpb.DisconnectRequest{SessionId: h.session.GetSessionId(),
		SessionToken: h.session.GetSessionToken(), Epoch: h.session.GetEpoch()}); err != nil {
		t.Fatalf("flooder's disconnect: %v", err)
	}
	if overrun, _ = gauge(t, addrs.Metrics, "seqd_headeronly_sessions_overrun"); overrun != 0 {
		t.Fatalf("%v well-behaved sessions dropped requests for want of a receive (%s +%d in all, %d retransmissions)",
			overrun, verbs.CounterDropNoRecv, noRecv, retrans)
	}
	return noRecv, true
}

// gauge scrapes the metric name (no labels); ok is false when the server
// does not export it.
func gauge(t testing.TB, metrics, name string) (v float64, ok bool) {
	t.Helper()
	resp, err := http.Get("http://" + metrics + "/metrics")
	if err != nil {
		t.Fatalf("metrics: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("metrics: %v", err)
	}
	for _, line := range strings.Split(string(body), "\n") {
		if rest, found := strings.CutPrefix(line, name+" "); found {
			f, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			if err != nil {
				t.Fatalf("metrics line %q: %v", line, err)
			}
			return f, true
		}
	}
	return 0, false
}

// udpRcvbufErrors is the host's count of UDP datagrams the kernel dropped
// because a socket's receive buffer was full (/proc/net/snmp), or 0 where
// it cannot be read. The userspace provider's QPs share one socket, so a
// flood costs other clients packets there, before any receive queue.
func udpRcvbufErrors() uint64 {
	b, err := os.ReadFile("/proc/net/snmp")
	if err != nil {
		return 0
	}
	var names []string
	for _, line := range strings.Split(string(b), "\n") {
		rest, ok := strings.CutPrefix(line, "Udp: ")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if names == nil {
			names = f
			continue
		}
		for i, name := range names {
			if name == "RcvbufErrors" && i < len(f) {
				v, _ := strconv.ParseUint(f[i], 10, 64)
				return v
			}
		}
	}
	return 0
}
