//go:build linux

package wire

import (
	"context"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"reflect"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/seqd/seqd/admin/adminclient"
	"github.com/seqd/seqd/admin/adminpb"
	"github.com/seqd/seqd/server"
	"github.com/seqd/seqd/spec"
	"github.com/seqd/seqd/verbs/rocev2"
	_ "github.com/seqd/seqd/verbs/soft"
)

// startSeqd runs seqd in-process (one worker, Spec-S0) and returns its
// admin client.
func startSeqd(t *testing.T, mode string) adminpb.AdminClient {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan server.Addrs, 1)
	done := make(chan error, 1)
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	go func() {
		done <- server.Run(ctx, server.Config{Device: "127.0.0.1:0", Admin: "127.0.0.1:0", Metrics: "off", Data: t.TempDir(),
			Init: true, Mode: mode}, quiet, func(a server.Addrs) { ready <- a })
	}()
	var a server.Addrs
	select {
	case a = <-ready:
	case err := <-done:
		cancel()
		t.Fatalf("seqd: %v", err)
	case <-time.After(20 * time.Second):
		cancel()
		t.Fatal("seqd not ready")
	}
	t.Cleanup(func() {
		cancel()
		<-done
	})
	cc, err := adminclient.Dial(ctx, a.Admin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return adminpb.NewAdminClient(cc)
}

func TestGenSeqd(t *testing.T) {
	adm := startSeqd(t, spec.ModeSpecS0)
	for _, flows := range []int{1, 64} {
		t.Run("flows="+itoa(flows), func(t *testing.T) {
			g := admitGen(t, adm, Config{Flows: flows, Window: max(4, 256/flows), InFlight: testInFlight(flows), Keep: 1 << 20}, spec.ModeSpecS0)
			// The server's format (hybrid, the default) advances its high
			// part with the clock: the generator predicts the rollover,
			// as the client does.
			if want := spec.HighPeriod(spec.FormatHybrid); g.tgt.HighPeriod != want || g.spec.Period() != want {
				t.Fatalf("high period %v, speculator's %v; want %v", g.tgt.HighPeriod, g.spec.Period(), want)
			}
			res := runUntilMeasured(t, g, func(t *testing.T, res *Result) {
				if res.Forged != 0 || res.BadICRC != 0 || res.Malformed != 0 {
					t.Fatalf("answers not all verified: %+v", res.Stats)
				}
			})
			if res.OpsPerSec() <= 0 || res.Kept == 0 {
				t.Fatalf("no throughput: %+v", res.Stats)
			}
			runAgain(t, g)
		})
	}
}

func TestGenHERD(t *testing.T) {
	adm := startSeqd(t, spec.ModeHERD)
	for _, flows := range []int{1, 64} {
		t.Run("flows="+itoa(flows), func(t *testing.T) {
			g := admitGen(t, adm, Config{Flows: flows, Window: max(1, 256/flows), InFlight: testInFlight(flows), Keep: 1 << 20}, spec.ModeHERD)
			res := runUntilMeasured(t, g, func(t *testing.T, res *Result) {
				if res.Forged+res.BadICRC+res.Malformed != 0 {
					t.Fatalf("answers not all verified: %+v", res.Stats)
				}
			})
			if res.OpsPerSec() <= 0 || res.Kept == 0 {
				t.Fatalf("no throughput: %+v", res.Stats)
			}
			runAgain(t, g)
		})
	}
}

// TestGenERPC: the generator's eRPC sessions (one per flow, up to its
// credits in flight) get verified answers from seqd in erpc mode, none
// retransmitted, reanswered or unmatched.
func TestGenERPC(t *testing.T) {
	adm := startSeqd(t, spec.ModeERPC)
	for _, flows := range []int{1, 64} {
		t.Run("flows="+itoa(flows), func(t *testing.T) {
			g := admitGen(t, adm, Config{Flows: flows, Window: spec.ERPCSlots, InFlight: testInFlight(flows), Keep: 1 << 20}, spec.ModeERPC)
			if g.eflow == nil || g.eflow[0].Session == 0 {
				t.Fatalf("flows not admitted as erpc sessions: %+v", g.tgt.Flows[0])
			}
			res := runUntilMeasured(t, g, func(t *testing.T, res *Result) {
				if res.Forged+res.BadICRC+res.Malformed+res.Reanswered+res.DupAnswers != 0 {
					t.Fatalf("answers not all verified: %+v", res.Stats)
				}
			})
			if res.OpsPerSec() <= 0 || res.Kept == 0 {
				t.Fatalf("no throughput: %+v", res.Stats)
			}
			runAgain(t, g)
		})
	}
}

// TestGenERPCSources: flows that share a source address (Config.Sources:
// a client host's sessions) leave in one GSO message per source, their
// segments numbered on across the flows for their ICRCs (the IPv4 ID the
// kernel gives segment k is k). A capture socket sees the segments in
// order; the ID each one's ICRC is right for must count 0, 1, 2... through
// each message. Numbered from 0 in each flow, the joined flows' requests
// would be dropped by a server for their ICRC.
func TestGenERPCSources(t *testing.T) {
	capture, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer capture.Close()
	const flows, sources, window = 64, 4, 2
	g, err := New(Config{Flows: flows, Sources: sources, Window: window, Keep: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if g.src[0] != g.src[flows/sources-1] || g.src[0] == g.src[flows/sources] {
		t.Fatalf("sources of flows 0, %d and %d: %v %v %v", flows/sources-1, flows/sources, g.src[0], g.src[flows/sources-1], g.src[flows/sources])
	}
	to := netip.MustParseAddrPort(capture.LocalAddr().String())
	tg := Target{Kind: ERPC}
	for i := range flows {
		tg.Flows = append(tg.Flows, FlowTarget{Server: to, QPN: 9, QKey: 0x55, Session: uint64(7 + i)})
	}
	if err := g.SetTarget(tg); err != nil {
		t.Fatal(err)
	}
	g.send(g.now())
	const perSource = flows / sources * window // segments in one source's message
	if g.st.Sent != flows*window || g.st.TxMessages != sources {
		t.Fatalf("sent %d requests in %d messages, want %d in %d", g.st.Sent, g.st.TxMessages, flows*window, sources)
	}
	capture.SetReadDeadline(time.Now().Add(5 * time.Second))
	b := make([]byte, 2048)
	for k := range flows * window {
		n, from, err := capture.ReadFrom(b)
		if err != nil {
			t.Fatalf("segment %d: %v", k, err)
		}
		src := from.(*net.UDPAddr)
		f := rocev2.Flow{Src: [4]byte(src.IP.To4()), Dst: to.Addr().As4(), SrcPort: uint16(src.Port), DstPort: to.Port(), FlagsFrag: 0x4000}
		id, ok := rocev2.VerifyICRCAnyID(&f, b[:n])
		if !ok || int(id) != k%perSource {
			t.Fatalf("segment %d (from %v): ICRC right for IPv4 ID %d (%v), want %d", k, src, id, ok, k%perSource)
		}
	}
}

// TestGenERPCSourcesServed: against seqd, flows that share sources are
// answered and every answer verified.
func TestGenERPCSourcesServed(t *testing.T) {
	adm := startSeqd(t, spec.ModeERPC)
	g := admitGen(t, adm, Config{Flows: 64, Sources: 4, Window: 2, Keep: 1 << 20}, spec.ModeERPC)
	res := runUntilMeasured(t, g, func(t *testing.T, res *Result) {
		if res.Forged+res.BadICRC+res.Malformed+res.Violations()+res.DupAnswers != 0 {
			t.Fatalf("answers not all verified: %+v", res.Stats)
		}
	})
	if perMsg := float64(res.Sent) / float64(res.TxMessages); perMsg <= 2 {
		t.Errorf("%.2f requests per message from flows of window 2 sharing 4 sources: flows not joined", perMsg)
	}
}

// TestGenERPCCredits: Config.Credits is what each session asks for, and
// the server grants (and reserves receives for) that many, while a
// flow keeps no more requests in flight than a session's slots.
func TestGenERPCCredits(t *testing.T) {
	adm := startSeqd(t, spec.ModeERPC)
	g := admitGen(t, adm, Config{Flows: 2, Window: spec.ERPCSlots, Credits: 4 * spec.ERPCSlots, Keep: 1 << 10}, spec.ModeERPC)
	if w := g.tgt.Flows[0].Window; w != 4*spec.ERPCSlots {
		t.Errorf("granted %d credits, want %d", w, 4*spec.ERPCSlots)
	}
	if w := g.eflow[0].Window(); w != spec.ERPCSlots {
		t.Errorf("flow window %d, want the %d slots", w, spec.ERPCSlots)
	}
}

// TestGenRunAgainAfterLoss: a run whose requests are lost, to its end,
// leaves its flows able to send in the next run. (The last run's drain
// gives up requests without making their flows ready: a second run on a
// loaded CI machine sent nothing.)
func TestGenRunAgainAfterLoss(t *testing.T) {
	hole, err := net.ListenPacket("udp4", "127.0.0.1:0") // reads nothing, answers nothing
	if err != nil {
		t.Fatal(err)
	}
	defer hole.Close()
	g, err := New(Config{Flows: 4, Window: 2, Timeout: 5 * time.Millisecond, Keep: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	tg := Target{Kind: ERPC}
	for i := range 4 {
		tg.Flows = append(tg.Flows, FlowTarget{Server: netip.MustParseAddrPort(hole.LocalAddr().String()), QPN: 9, QKey: 0x55, Session: uint64(7 + i)})
	}
	if err := g.SetTarget(tg); err != nil {
		t.Fatal(err)
	}
	for run := range 2 {
		res, err := g.Run(context.Background(), 0, 30*time.Millisecond, nil)
		if err != nil {
			t.Fatalf("run %d: %v", run, err)
		}
		if res.Sent == 0 || res.Lost == 0 {
			t.Fatalf("run %d: sent %d, lost %d: want both (every request lost)", run, res.Sent, res.Lost)
		}
	}
}

// admitGen makes a generator of cfg and admits its flows at the seqd
// behind adm in mode; both are closed when the test ends.
func admitGen(t *testing.T, adm adminpb.AdminClient, cfg Config, mode string) *Gen {
	t.Helper()
	g, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	ctx := context.Background()
	ss, err := Admit(ctx, adm, g, mode, 0, "wire-test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close(ctx) })
	return g
}

// runAgain runs g again on the same flows, as loadgen -slices does:
// their send times and quarantines carry over on the generator's one
// clock, so the run is measured, and its values exceed the last run's.
func runAgain(t *testing.T, g *Gen) {
	t.Helper()
	floor := g.chk.Floor()
	runUntilMeasured(t, g, func(t *testing.T, res *Result) {
		if res.Forged != 0 || res.BadICRC != 0 || res.Malformed != 0 || res.Violations() != 0 {
			t.Fatalf("run again: answers not all verified: %+v", res.Stats)
		}
	})
	if g.chk.Floor() <= floor {
		t.Fatalf("run again: highest value %d, not above the last run's %d", g.chk.Floor(), floor)
	}
}

// runUntilMeasured runs g (warm-up 100 ms, 300 ms measured) until a run
// measures answers, at most 20 times: a loaded machine may starve an
// in-process server for a whole run. Every run must be free of
// violations and pass check; the phases are called once each, in order.
func runUntilMeasured(t *testing.T, g *Gen, check func(*testing.T, *Result)) *Result {
	t.Helper()
	for range 20 {
		var phases []bool
		res, err := g.Run(context.Background(), 100*time.Millisecond, 300*time.Millisecond, func(s bool) { phases = append(phases, s) })
		if err != nil {
			t.Fatalf("run: %v (%+v)", err, res.Stats)
		}
		t.Logf("flows=%d: %.3f Mops/s, %+v", g.Flows(), res.OpsPerSec()/1e6, res.Stats)
		check(t, res)
		if len(phases) != 2 || !phases[0] || phases[1] {
			t.Fatalf("phases %v", phases)
		}
		if res.Measured > 0 {
			return res
		}
	}
	t.Fatal("no run measured an answer")
	return nil
}

func itoa(n int) string {
	b := []byte{}
	for {
		b = append([]byte{byte('0' + n%10)}, b...)
		if n /= 10; n == 0 {
			return string(b)
		}
	}
}

func TestGenFloors(t *testing.T) {
	for _, kind := range []Kind{ProviderEcho, RawEcho} {
		for _, flows := range testFlows {
			t.Run(kind.String()+"/flows="+itoa(flows), func(t *testing.T) {
				var e *EchoServer
				var err error
				if kind == ProviderEcho {
					e, err = StartProviderEcho(floorCore, 8192, nil)
				} else {
					e, err = StartRawEcho(floorCore)
				}
				if err != nil {
					t.Fatal(err)
				}
				defer e.Close()
				g, err := New(Config{Flows: flows, Window: max(1, 256/flows), Keep: 1 << 10})
				if err != nil {
					t.Fatal(err)
				}
				defer g.Close()
				if err := g.SetTarget(e.Target(flows, g.Window())); err != nil {
					t.Fatal(err)
				}
				res, err := g.Run(context.Background(), 50*time.Millisecond, 200*time.Millisecond, nil)
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("%v flows=%d: %.3f Mops/s %+v", kind, flows, res.OpsPerSec()/1e6, res.Stats)
				// Stale answers are late answers to requests given up on a
				// loaded machine: never more than those.
				if res.Measured == 0 || res.Forged+res.BadICRC+res.Malformed != 0 || res.Stale > res.Lost {
					t.Fatalf("%+v", res.Stats)
				}
			})
		}
	}
}

var floorCore = envInt("WIRE_FLOOR_CORE", -1)

var testFlows = []int{1, envInt("WIRE_FLOWS", 64)}

func envInt(k string, d int) int {
	if v, err := strconv.Atoi(os.Getenv(k)); err == nil {
		return v
	}
	return d
}

// TestFlowSources checks the kernel does what the design relies on: a
// socket bound to INADDR_ANY sends each flow's packets from the flow's own
// source address (IP_PKTINFO, any address in 127/8 without IP_FREEBIND),
// and answers to every flow's address arrive on that one socket.
func TestFlowSources(t *testing.T) {
	srv, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	const flows = 3
	g, err := New(Config{Flows: flows, Window: 1, Keep: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if err := g.SetTarget(EchoTarget(RawEcho, srv.LocalAddr().(*net.UDPAddr).AddrPort(), 9, 0x55, flows, 1)); err != nil {
		t.Fatal(err)
	}
	seen := map[netip.AddrPort]int{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 2048)
		for {
			n, from, err := srv.ReadFromUDPAddrPort(buf)
			if err != nil {
				return // closed after the run
			}
			seen[from]++
			srv.WriteToUDPAddrPort(buf[:n], from) // echo: the answer goes to the flow's address
		}
	}()
	res, err := g.Run(context.Background(), 0, 300*time.Millisecond, nil)
	srv.Close()
	<-done
	if err != nil {
		t.Fatal(err)
	}
	for i := range flows {
		ap, _ := g.FlowAddr(i)
		if seen[ap] == 0 {
			t.Fatalf("no packet from flow %d's %v; seen %v", i, ap, seen)
		}
	}
	if res.Answers < flows || res.Malformed != 0 || res.Stale > res.Lost {
		t.Fatalf("answers to the flows' addresses not all received on the one socket: %+v", res.Stats)
	}
}

// BenchmarkRunRawEcho runs the whole generator loop (sockets included)
// against the raw UDP echo for 300 ms per iteration and reports the heap
// allocations per answered request across the process (allocs/req: 0
// but for the run's own setup) and the throughput.
func BenchmarkRunRawEcho(b *testing.B) {
	e, err := StartRawEcho(floorCore)
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	g, err := New(Config{Flows: 64, Window: 16, Keep: 1 << 10})
	if err != nil {
		b.Fatal(err)
	}
	defer g.Close()
	var answers, mallocs uint64
	var secs float64
	for b.Loop() {
		if err := g.SetTarget(e.Target(64, 16)); err != nil {
			b.Fatal(err)
		}
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		res, err := g.Run(context.Background(), 0, 300*time.Millisecond, nil)
		runtime.ReadMemStats(&m1)
		if err != nil {
			b.Fatal(err)
		}
		answers += res.Answers
		mallocs += m1.Mallocs - m0.Mallocs
		secs += res.MeasuredSeconds
	}
	if answers > 0 {
		b.ReportMetric(float64(mallocs)/float64(answers), "allocs/req")
		b.ReportMetric(float64(answers)/secs/1e6, "Mops")
	}
}

// TestStatsAdd: Add sums every field of Stats (loadgen -slices folds a
// server's slices with it), so a field added to Stats and not to Add
// fails here.
func TestStatsAdd(t *testing.T) {
	var one Stats
	v := reflect.ValueOf(&one).Elem()
	for i := range v.NumField() {
		switch f := v.Field(i); f.Kind() {
		case reflect.Uint64:
			f.SetUint(uint64(i + 1))
		case reflect.Float64:
			f.SetFloat(float64(i + 1))
		default:
			t.Fatalf("Stats.%s: kind %v not covered by this test", v.Type().Field(i).Name, f.Kind())
		}
	}
	var sum Stats
	sum.Add(one)
	sum.Add(one)
	s := reflect.ValueOf(sum)
	for i := range s.NumField() {
		f, o := s.Field(i), v.Field(i)
		if f.Kind() == reflect.Uint64 && f.Uint() != 2*o.Uint() || f.Kind() == reflect.Float64 && f.Float() != 2*o.Float() {
			t.Errorf("Stats.%s: %v after adding %v twice", s.Type().Field(i).Name, f, o)
		}
	}
}

// testInFlight caps what many flows keep outstanding in these tests,
// which check answers, not capacity: 64 flows' full windows (256 to 512
// requests) queued at a server that shares two cores with the other
// test packages under -race waited past spec.MaxResidence, and the
// server rightly dropped every one (0 answers in ten rounds).
func testInFlight(flows int) int {
	if flows > 1 {
		return 16
	}
	return 0
}
