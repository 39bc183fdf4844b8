package e2e

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seqd/seqd/admin/adminpb"
	"github.com/seqd/seqd/admin/admintest"
	"github.com/seqd/seqd/client"
	"github.com/seqd/seqd/loadgen/verify"
	"github.com/seqd/seqd/server"
	"github.com/seqd/seqd/spec"
	"github.com/seqd/seqd/verbs"
	"github.com/seqd/seqd/verbs/rocev2"
)

// hostile sends crafted RoCEv2 packets at a running seqd's data port from
// a plain UDP socket. It is also an admitted client (a synthetic Connect
// naming the socket as a QP), so that it can flood beyond its window.
type hostile struct {
	conn    *net.UDPConn
	src     netip.AddrPort
	dst     netip.AddrPort
	dstQPN  uint32 // the server request QP assigned to the admitted QP
	qkey    uint32
	srcQPN  uint32 // the admitted QP
	window  int
	rng     *rand.Rand
	tag     uint32
	answers atomic.Uint64 // answers the server sent to the admitted QP
	session *adminpb.ConnectResponse
}

// hostileKind is one kind of bad input, the counter that must account for
// every packet of it, and a builder.
type hostileKind struct {
	name    string
	counter string // provider counter, or "drops:<reason>" for headeronly, or "" (sum of every rx_drop_*)
	build   func(h *hostile, buf []byte) []byte
}

func (h *hostile) flow() rocev2.Flow {
	return rocev2.Flow{Src: h.src.Addr().As4(), Dst: h.dst.Addr().As4(), SrcPort: h.src.Port(), DstPort: h.dst.Port(), FlagsFrag: 0x4000}
}

// packet encodes p with a correct ICRC.
func (h *hostile) packet(p *rocev2.Packet, buf []byte) []byte {
	buf = buf[:p.Len()]
	if _, err := p.Encode(buf); err != nil {
		panic(fmt.Sprintf("encode %v: %v", p.Opcode, err)) // a bug in this test
	}
	f := h.flow()
	rocev2.PutICRC(&f, buf)
	return buf
}

// request is a well-formed Spec-S0 request from the admitted QP.
func (h *hostile) request() rocev2.Packet {
	h.tag = (h.tag + 1) % spec.NumTags
	return rocev2.Packet{Opcode: rocev2.UDSendOnlyWithImm, PKey: rocev2.DefaultPKey, DestQP: h.dstQPN,
		QKey: h.qkey, SrcQP: h.srcQPN, Imm: uint32(spec.MustRequestImm(spec.Tag(h.tag), spec.NoGuess))}
}

// invalidForUD lists every opcode byte the server's UD request QP must
// refuse as an opcode: invalid ones and valid ones of other transports.
// UD SEND_ONLY (0x64) is a valid UD opcode; seqd refuses it itself.
func invalidForUD() []byte {
	var ops []byte
	for b := range 256 {
		if o := rocev2.Opcode(b); o != rocev2.UDSendOnly && o != rocev2.UDSendOnlyWithImm {
			ops = append(ops, byte(b))
		}
	}
	return ops
}

func hostileKinds() []hostileKind {
	ops := invalidForUD()
	return []hostileKind{
		{"random bytes", "", func(h *hostile, buf []byte) []byte {
			b := buf[:1+h.rng.IntN(200)] // zero-length: TestZeroLengthDatagram
			for i := range b {
				b[i] = byte(h.rng.Uint32())
			}
			return b
		}},
		{"truncated", verbs.CounterDropMalformed, func(h *hostile, buf []byte) []byte {
			p := h.request()
			b := h.packet(&p, buf)
			return b[:1+h.rng.IntN(len(b)-1)]
		}},
		{"oversized", verbs.CounterDropLength, func(h *hostile, buf []byte) []byte {
			p := h.request()
			p.Payload = buf[len(buf)-(64+h.rng.IntN(8000)):] // beyond any receive slot
			return h.packet(&p, buf[:len(buf)/2])
		}},
		{"every opcode invalid for UD", verbs.CounterDropBadOpcode, func(h *hostile, buf []byte) []byte {
			op := rocev2.Opcode(ops[h.rng.IntN(len(ops))])
			if !op.Valid() {
				b := buf[:rocev2.BTHLen+rocev2.ICRCLen+h.rng.IntN(64)]
				for i := range b {
					b[i] = byte(h.rng.Uint32())
				}
				b[0] = byte(op)
				return b
			}
			p := rocev2.Packet{Opcode: op, PKey: rocev2.DefaultPKey, DestQP: h.dstQPN, QKey: h.qkey, SrcQP: h.srcQPN, DMALen: 8}
			if op.HasPayload() {
				p.Payload = make([]byte, 8)
			}
			return h.packet(&p, buf)
		}},
		{"bad ICRC", verbs.CounterDropBadICRC, func(h *hostile, buf []byte) []byte {
			p := h.request()
			b := h.packet(&p, buf)
			b[len(b)-1-h.rng.IntN(4)] ^= byte(1 + h.rng.IntN(255))
			return b
		}},
		{"wrong P_Key", verbs.CounterDropBadPKey, func(h *hostile, buf []byte) []byte {
			p := h.request()
			p.PKey = uint16(1 + h.rng.IntN(0x7ffe))
			return h.packet(&p, buf)
		}},
		{"wrong Q_Key", verbs.CounterDropBadQKey, func(h *hostile, buf []byte) []byte {
			p := h.request()
			for p.QKey == h.qkey {
				p.QKey = h.rng.Uint32()
			}
			return h.packet(&p, buf)
		}},
		{"unknown destination QPN", verbs.CounterDropUnknownQPN, func(h *hostile, buf []byte) []byte {
			p := h.request()
			p.DestQP = 0xfff000 + uint32(h.rng.IntN(0xfff))
			return h.packet(&p, buf)
		}},
		{"source never connected", "drops:unknown_source", func(h *hostile, buf []byte) []byte {
			p := h.request()
			p.SrcQP = h.srcQPN + 1 + uint32(h.rng.IntN(1000))
			return h.packet(&p, buf)
		}},
		{"UD SEND without immediate", "drops:bad_opcode", func(h *hostile, buf []byte) []byte {
			p := h.request()
			p.Opcode = rocev2.UDSendOnly
			return h.packet(&p, buf)
		}},
		{"request with a payload", "drops:bad_length", func(h *hostile, buf []byte) []byte {
			p := h.request()
			p.Payload = buf[len(buf)-(1+h.rng.IntN(7)):]
			return h.packet(&p, buf[:len(buf)/2])
		}},
	}
}

// counters reads the provider counters and the headeronly drop reasons
// from Status (the drop reasons are Prometheus-only; Status has their
// sum, so per-reason values come from the metrics collector below).
func providerCounters(ctx context.Context, t testing.TB, adm adminpb.AdminClient) map[string]uint64 {
	t.Helper()
	st, err := adm.Status(ctx, &adminpb.StatusRequest{})
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	m := map[string]uint64{"drops": st.GetDrops(), "served": st.GetServed()}
	for k, v := range st.GetProviderCounters() {
		m[k] = v
	}
	return m
}

func sumDrops(m map[string]uint64) uint64 {
	var n uint64
	for k, v := range m {
		if len(k) > 8 && k[:8] == "rx_drop_" {
			n += v
		}
	}
	return n
}

// TestHostileDataPort sends every kind of bad input at a running seqd's
// data port while well-behaved clients run, in alternating phases: quiet,
// hostile, quiet, hostile... It checks that seqd keeps serving (the
// well-behaved clients complete calls in every hostile phase), that every
// bad packet is counted under its kind (less any the kernel itself dropped
// from the data socket's full receive buffer, which it counts in
// /proc/net/udp) and that no client ever sees a violation. It reports the
// clients' throughput in hostile phases against the quiet phases' (the
// target is 80%); that ratio is asserted only with SEQD_STRICT_PERF=1,
// because on a shared CI machine it measures the neighbours too.
func TestHostileDataPort(t *testing.T) {
	phases, phase := 11, 500*time.Millisecond
	if testing.Short() {
		phases, phase = 5, 400*time.Millisecond
	}
	addrs := startWithMetrics(t)
	addr := addrs.Admin
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	adm := admintest.Client(ctx, t, addr)

	h := newHostile(ctx, t, adm)
	cs := dialN(t, ctx, addr, "", 2)
	kinds := hostileKinds()
	pools, floodPool := h.prebuild(kinds, 512)
	sent := make([]uint64, len(kinds))
	var flood uint64
	before := providerCounters(ctx, t, adm)
	dropsBefore := dropReasons(t, addrs.Metrics)
	kernelBefore := udpDrops(t, h.dst.Port())

	var v verify.History
	origin := time.Now()
	var quiet, loud []float64
	for i := range phases {
		hostileOn := i%2 == 1
		stop := make(chan struct{})
		var wg sync.WaitGroup
		if hostileOn {
			wg.Add(1)
			go func() {
				defer wg.Done()
				f := h.run(pools, floodPool, sent, stop)
				flood += f
			}()
		}
		n, err := timedLoad(ctx, cs, 8, phase, origin, &v)
		close(stop)
		wg.Wait()
		if err != nil {
			t.Fatalf("phase %d (hostile %v): GetTimestamp: %v", i, hostileOn, err)
		}
		rate := float64(n) / phase.Seconds()
		if hostileOn {
			loud = append(loud, rate)
		} else {
			quiet = append(quiet, rate)
		}
	}
	if err := v.Check().Err(); err != nil {
		t.Fatal(err)
	}
	for i, c := range cs {
		if s := c.Stats(); s.Regressions != 0 || s.Malformed != 0 {
			t.Errorf("client %d: %+v", i, s)
		}
	}

	// Every bad packet is counted under its kind (UDP on loopback with
	// paced sends loses nothing; wait for the server to drain its socket).
	// Kinds the provider drops before any receive is consumed are counted
	// exactly; random bytes land in malformed, bad opcode or bad ICRC (a
	// random ICRC matches with probability 2^-32). Kinds that reach seqd
	// consume a posted receive, so each is counted either under its
	// reason or, had the receive queue run dry, as rx_drop_no_recv.
	byName := map[string]uint64{}
	var total uint64
	for i, k := range kinds {
		byName[k.name] = sent[i]
		total += sent[i]
		t.Logf("sent %6d %s", sent[i], k.name)
	}
	t.Logf("sent %6d requests from the admitted QP (window %d) as a flood; %d answered", flood, h.window, h.answers.Load())
	exact := []struct{ kind, counter string }{
		{"wrong P_Key", verbs.CounterDropBadPKey}, {"wrong Q_Key", verbs.CounterDropBadQKey},
		{"unknown destination QPN", verbs.CounterDropUnknownQPN},
	}
	randomCounters := []string{verbs.CounterDropMalformed, verbs.CounterDropBadOpcode, verbs.CounterDropBadICRC}
	randomOthers := byName["truncated"] + byName["every opcode invalid for UD"] + byName["bad ICRC"]
	needRecv := []struct{ kind, counter string }{
		{"oversized", verbs.CounterDropLength}, {"source never connected", "drops:unknown_source"},
		{"UD SEND without immediate", "drops:bad_opcode"}, {"request with a payload", "drops:bad_length"},
	}
	var after, afterDrops map[string]uint64
	var kernel uint64 // datagrams the kernel dropped at the data socket (full receive buffer)
	d := func(c string) uint64 { return delta(c, before, after, dropsBefore, afterDrops) }
	// lost is how many hostile packets no counter of seqd accounts for;
	// over says which counter rose by more than was sent of its kinds.
	lost := func() (lost uint64, over []string) {
		for _, e := range exact {
			got := d(e.counter)
			if got > byName[e.kind] {
				over = append(over, fmt.Sprintf("%s: %s rose by %d, want %d", e.kind, e.counter, got, byName[e.kind]))
			}
			lost += byName[e.kind] - min(got, byName[e.kind])
		}
		var r uint64
		for _, c := range randomCounters {
			r += d(c)
		}
		if want := randomOthers + byName["random bytes"]; r > want {
			over = append(over, fmt.Sprintf("random bytes and the invalid kinds: %v rose by %d, more than the %d sent", randomCounters, r, want))
		} else {
			lost += want - r
		}
		var short uint64
		for _, e := range needRecv {
			got := d(e.counter)
			if got > byName[e.kind] {
				over = append(over, fmt.Sprintf("%s: %s rose by %d, more than the %d sent", e.kind, e.counter, got, byName[e.kind]))
			}
			short += byName[e.kind] - min(got, byName[e.kind])
		}
		// A kind that reaches seqd is counted under its reason or, had
		// the receive queue run dry, as rx_drop_no_recv.
		lost += short - min(short, d(verbs.CounterDropNoRecv))
		return lost, over
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		after, afterDrops = providerCounters(ctx, t, adm), dropReasons(t, addrs.Metrics)
		kernel = udpDrops(t, h.dst.Port()) - kernelBefore
		if l, _ := lost(); l <= kernel || time.Now().After(deadline) {
			break
		}
	}
	l, over := lost()
	for _, o := range over {
		t.Error(o)
	}
	if l > kernel {
		t.Errorf("%d hostile packets were counted under no reason (the kernel dropped %d datagrams at the data socket)", l-kernel, kernel)
	}
	for _, k := range []struct{ kind, counter string }{{"truncated", verbs.CounterDropMalformed},
		{"every opcode invalid for UD", verbs.CounterDropBadOpcode}, {"bad ICRC", verbs.CounterDropBadICRC}} {
		if got := d(k.counter); got+kernel < byName[k.kind] {
			t.Errorf("%s: %s rose by %d, want at least %d (less the kernel's %d drops)", k.kind, k.counter, got, byName[k.kind], kernel)
		}
	}
	noRecv := d(verbs.CounterDropNoRecv)
	if got, want := d("drops:wc_error"), d(verbs.CounterDropLength); got != want {
		t.Errorf("oversized: seqd counted %d receive errors, the provider %d length drops", got, want)
	}
	t.Logf("the kernel dropped %d datagrams at the data socket (full receive buffer); %d hostile packets accounted to no reason", kernel, l)
	t.Logf("%d hostile packets; %s rose by %d (the flood beyond the window, and any request that met no posted receive)",
		total, verbs.CounterDropNoRecv, noRecv)

	// Throughput of the well-behaved clients: each hostile phase against
	// the mean of the quiet phases either side of it, which cancels the
	// drift of a machine shared with other jobs; the median of those
	// ratios. The target is 80%, asserted with SEQD_STRICT_PERF=1 only;
	// the numbers are always reported.
	var ratios []float64
	for i := range loud {
		ratios = append(ratios, loud[i]/((quiet[i]+quiet[i+1])/2))
	}
	mr := median(ratios)
	t.Logf("well-behaved clients: quiet phases %v calls/s, hostile phases %v calls/s; hostile/quiet ratios %.2f, median %.0f%%",
		rounded(quiet), rounded(loud), ratios, 100*mr)
	for i, r := range loud {
		if r == 0 {
			t.Errorf("hostile phase %d: the well-behaved clients completed no call", i)
		}
	}
	if os.Getenv("SEQD_STRICT_PERF") == "1" && mr < 0.8 {
		t.Errorf("hostile input cut the well-behaved clients' throughput to %.0f%% of the quiet phases' (want at least 80%%)", 100*mr)
	}
}

func delta(counter string, before, after, db, da map[string]uint64) uint64 {
	switch {
	case counter == "":
		return sumDrops(after) - sumDrops(before)
	case len(counter) > 6 && counter[:6] == "drops:":
		r := counter[6:]
		return da[r] - db[r]
	}
	return after[counter] - before[counter]
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func rounded(xs []float64) []int {
	out := make([]int, len(xs))
	for i, x := range xs {
		out[i] = int(x)
	}
	return out
}

// timedLoad runs callers goroutines over clients for d, recording every
// call (times from origin) in v, and returns the number of calls made.
func timedLoad(ctx context.Context, clients []*client.Client, callers int, d time.Duration, origin time.Time, v *verify.History) (int, error) {
	end := time.Now().Add(d)
	var wg sync.WaitGroup
	var n atomic.Int64
	var first atomic.Pointer[error]
	for g := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := clients[g%len(clients)]
			for time.Now().Before(end) {
				start := time.Since(origin)
				ts, err := c.GetTimestamp(ctx)
				if err != nil {
					first.CompareAndSwap(nil, &err)
					return
				}
				v.Record(g, verify.Call{Start: start, End: time.Since(origin), Value: uint64(ts)})
				n.Add(1)
			}
		}()
	}
	wg.Wait()
	if p := first.Load(); p != nil {
		return int(n.Load()), *p
	}
	return int(n.Load()), nil
}

// newHostile opens the hostile socket and admits it as a one-QP client
// with a small window.
func newHostile(ctx context.Context, t *testing.T, adm adminpb.AdminClient) *hostile {
	t.Helper()
	conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	conn.SetWriteBuffer(4 << 20)
	h := &hostile{conn: conn, src: conn.LocalAddr().(*net.UDPAddr).AddrPort(), srcQPN: 0x4242, window: 4,
		rng: rand.New(rand.NewPCG(1, 2))}
	a := verbs.Address{GID: verbs.GIDFromAddr(h.src.Addr()), Port: h.src.Port()}
	ab, _ := a.MarshalBinary()
	resp, err := adm.Connect(ctx, &adminpb.ConnectRequest{Qps: []*adminpb.Endpoint{{Address: ab, Qpn: h.srcQPN}},
		Window: uint32(h.window), ClientName: "hostile", ProtocolVersion: spec.ProtocolVersion})
	if err != nil {
		t.Fatalf("hostile connect: %v", err)
	}
	h.window, h.qkey, h.session = int(resp.GetWindow()), resp.GetQkey(), resp
	srv := resp.GetServerQps()[resp.GetAssignment()[0]]
	var sa verbs.Address
	if err := sa.UnmarshalBinary(srv.GetAddress()); err != nil {
		t.Fatal(err)
	}
	h.dst, h.dstQPN = netip.AddrPortFrom(sa.GID.Addr(), sa.Port), srv.GetQpn()
	go func() { // count (and drain) the answers to the admitted QP
		buf := make([]byte, 2048)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				return
			}
			var p rocev2.Packet
			if p.Decode(buf[:n]) == nil && p.DestQP == h.srcQPN {
				h.answers.Add(1)
			}
		}
	}()
	return h
}

// prebuild builds n packets of each kind and n flood requests ahead of
// the phases, so that the sender spends its CPU on sending only: an
// attacker on another machine would cost seqd's machine nothing to build
// its packets.
func (h *hostile) prebuild(kinds []hostileKind, n int) (pools [][][]byte, flood [][]byte) {
	buf := make([]byte, 1<<14)
	for _, k := range kinds {
		var pool [][]byte
		for range n {
			pool = append(pool, slices.Clone(k.build(h, buf)))
		}
		pools = append(pools, pool)
	}
	for range n {
		p := h.request()
		flood = append(flood, slices.Clone(h.packet(&p, buf)))
	}
	return pools, flood
}

// run sends, until stop is closed, one packet of each kind and a flood
// of valid requests from the admitted QP (twice its window) every
// millisecond: about 19,000 packets a second. It returns the number of
// flood requests sent.
func (h *hostile) run(pools [][][]byte, flood [][]byte, sent []uint64, stop <-chan struct{}) uint64 {
	var nflood uint64
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for j := 0; ; j++ {
		select {
		case <-stop:
			return nflood
		case <-tick.C:
		}
		for i, pool := range pools {
			if _, err := h.conn.WriteToUDPAddrPort(pool[j%len(pool)], h.dst); err == nil {
				sent[i]++
			}
		}
		for k := range 2 * h.window {
			if _, err := h.conn.WriteToUDPAddrPort(flood[(j*2*h.window+k)%len(flood)], h.dst); err == nil {
				nflood++
			}
		}
	}
}

// startWithMetrics runs seqd (Spec-S0) in-process with its metrics
// endpoint on an ephemeral port.
func startWithMetrics(t testing.TB) server.Addrs {
	t.Helper()
	return startAddrs(t, server.Config{Metrics: "127.0.0.1:0", Workers: 2, MaxWindow: 64})
}

// dropReasons scrapes seqd_headeronly_drops_total by reason.
func dropReasons(t testing.TB, metrics string) map[string]uint64 {
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
	m := map[string]uint64{}
	const prefix = `seqd_headeronly_drops_total{reason="`
	for _, line := range strings.Split(string(body), "\n") {
		rest, ok := strings.CutPrefix(line, prefix)
		if !ok {
			continue
		}
		reason, val, ok := strings.Cut(rest, `"} `)
		if !ok {
			continue
		}
		f, err := strconv.ParseFloat(val, 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		m[reason] = uint64(f)
	}
	if len(m) == 0 {
		t.Fatalf("no seqd_headeronly_drops_total in /metrics")
	}
	return m
}

// TestZeroLengthDatagram: an empty UDP datagram at the data port is bad
// input like any other and must be counted (rx_drop_malformed).
func TestZeroLengthDatagram(t *testing.T) {
	addrs := startWithMetrics(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adm := admintest.Client(ctx, t, addrs.Admin)
	h := newHostile(ctx, t, adm)
	before := sumDrops(providerCounters(ctx, t, adm))
	const n = 50
	for range n {
		if _, err := h.conn.WriteToUDPAddrPort(nil, h.dst); err != nil {
			t.Fatal(err)
		}
	}
	var got uint64
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if got = sumDrops(providerCounters(ctx, t, adm)) - before; got >= n {
			return
		}
	}
	t.Fatalf("%d zero-length datagrams, rx_drop_* rose by %d", n, got)
}

// udpDrops sums the drops column of /proc/net/udp over the sockets bound
// to port: datagrams the kernel discarded because a socket's receive
// buffer was full.
func udpDrops(t testing.TB, port uint16) uint64 {
	t.Helper()
	b, err := os.ReadFile("/proc/net/udp")
	if err != nil {
		t.Fatalf("udp drops: %v", err)
	}
	var n uint64
	found := false
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 13 {
			continue
		}
		_, hexPort, ok := strings.Cut(f[1], ":")
		if p, err := strconv.ParseUint(hexPort, 16, 16); !ok || err != nil || uint16(p) != port {
			continue
		}
		drops, err := strconv.ParseUint(f[len(f)-1], 10, 64)
		if err != nil {
			t.Fatalf("udp drops: line %q: %v", line, err)
		}
		n, found = n+drops, true
	}
	if !found {
		t.Fatalf("udp drops: no socket bound to port %d in /proc/net/udp", port)
	}
	return n
}
