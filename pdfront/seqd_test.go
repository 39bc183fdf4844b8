package pdfront_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/pingcap/kvproto/pkg/pdpb"
	pd "github.com/tikv/pd/client"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/seqd/seqd/admin/adminclient"
	"github.com/seqd/seqd/admin/adminpb"
	"github.com/seqd/seqd/client"
	"github.com/seqd/seqd/ha/hatest"
	"github.com/seqd/seqd/internal/testbin"
	"github.com/seqd/seqd/loadgen/verify"
	"github.com/seqd/seqd/pdfront"
	_ "github.com/seqd/seqd/verbs/soft"
)

// These tests put PD's unmodified Go client in front of real seqd
// processes (the binary, built once) through the front end, and kill
// seqd under load: a kill -9 restart of one instance, and the leader of
// an HA group on etcd. Every value the PD client handed out is checked
// by verify.History: unique, per-caller increasing, real-time ordered.

func seqdBin(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the seqd binary")
	}
	return testbin.Seqd(t)
}

// proc is one seqd process, restartable with the same arguments.
type proc struct {
	t    testing.TB
	addr string
	args []string
	cmd  *exec.Cmd
	done chan struct{}
	log  bytes.Buffer
	mu   sync.Mutex
}

func (p *proc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.Write(b)
}

func startProc(t testing.TB, args ...string) *proc {
	t.Helper()
	p := &proc{t: t, addr: fmt.Sprintf("127.0.0.1:%d", hatest.FreePorts(t, 1)[0])}
	p.args = append([]string{"-admin", p.addr, "-device", "127.0.0.1:0", "-metrics", "off", "-mode", "fasst"}, args...)
	p.start()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			p.mu.Lock()
			s := p.log.String()
			p.mu.Unlock()
			t.Logf("seqd %s log (tail):\n%s", p.addr, s[max(0, len(s)-3000):])
		}
	})
	return p
}

func (p *proc) start() {
	p.cmd = exec.Command(seqdBin(p.t), p.args...)
	p.cmd.Stdout, p.cmd.Stderr = p, p
	if err := p.cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	p.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) { cmd.Wait(); close(done) }(p.cmd, p.done)
}

func (p *proc) kill() {
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// role is the instance's HA role, "" when it does not answer.
func (p *proc) role() string {
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	cc, err := adminclient.Dial(ctx, p.addr)
	if err != nil {
		return ""
	}
	defer cc.Close()
	if h, err := grpc_health_v1.NewHealthClient(cc).Check(ctx, &grpc_health_v1.HealthCheckRequest{}); err != nil ||
		h.GetStatus() != grpc_health_v1.HealthCheckResponse_SERVING {
		return ""
	}
	st, err := adminpb.NewAdminClient(cc).Status(ctx, &adminpb.StatusRequest{})
	if err != nil {
		return ""
	}
	return st.GetRole()
}

// waitRole waits until one of ps (not skip) answers with role want ("" =
// any role: serving).
func waitRole(t testing.TB, ps []*proc, skip *proc, want string) *proc {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		for _, p := range ps {
			if r := p.role(); p != skip && r != "" && (want == "" || r == want) {
				return p
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no seqd instance with role %q within 20s", want)
	return nil
}

func quiet() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
}

// startSingle starts one seqd (no HA) on a fresh data directory and
// waits until it serves.
func startSingle(t testing.TB) *proc {
	t.Helper()
	s := startProc(t, "-init", "-data", t.TempDir())
	waitRole(t, []*proc{s}, nil, "")
	return s
}

// dialSeqd dials a seqd client of addrs, closed when the test ends.
func dialSeqd(ctx context.Context, t testing.TB, addrs ...string) *client.Client {
	t.Helper()
	c, err := client.Dial(ctx, strings.Join(addrs, ","), client.WithLogger(quiet()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// frontOver serves a front end over a seqd client of addrs.
func frontOver(t testing.TB, addrs []string) (*pdfront.Server, string, *client.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	c := dialSeqd(ctx, t, addrs...)
	srv, addr := startFront(t, pdfront.NewClientSource(c))
	return srv, addr, c
}

// waitCalls waits until v holds n more calls than it held.
func waitCalls(t *testing.T, v *verify.History, n int) {
	t.Helper()
	want := v.Len() + n
	deadline := time.Now().Add(30 * time.Second)
	for v.Len() < want {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d calls within 30s", v.Len(), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestPDClientAcrossSeqdRestart(t *testing.T) {
	s := startSingle(t)
	s.args = slices.DeleteFunc(s.args, func(a string) bool { return a == "-init" }) // later starts find the mark
	srv, addr, c := frontOver(t, []string{s.addr})
	pc := newPD(t, addr)
	var v verify.History
	stop := make(chan struct{})
	errs, wait := hammer(pc, 100, &v, stop)
	for range 2 {
		waitCalls(t, &v, 2000)
		s.kill()
		s.start()
		waitRole(t, []*proc{s}, nil, "")
		waitCalls(t, &v, 2000)
	}
	close(stop)
	wait()
	if err := v.Check().Err(); err != nil {
		t.Fatal(err)
	}
	st := srv.Stats()
	t.Logf("verified %d PD client calls across 2 seqd kill -9 restarts: %d failed (retried), front end %+v, seqd client reconnects %d",
		v.Len(), errs.Load(), st, c.Stats().Reconnects)
	if st.Refused != 0 {
		t.Fatalf("the floor refused %d ranges", st.Refused)
	}
}

func TestPDClientAcrossHAFailover(t *testing.T) {
	seqdBin(t)
	etcd := hatest.Start(t, 1)
	var ps []*proc
	var addrs []string
	for range 3 {
		p := startProc(t, "-etcd-endpoints", strings.Join(etcd.Endpoints(), ","), "-etcd-prefix", "/"+t.Name(),
			"-data", t.TempDir(), "-init") // a new group: -init, never needed again
		ps, addrs = append(ps, p), append(addrs, p.addr)
	}
	lead := waitRole(t, ps, nil, adminclient.RoleLeader)
	srv, addr, c := frontOver(t, addrs)
	pc := newPD(t, addr)
	var v verify.History
	stop := make(chan struct{})
	callers := 100
	if n, err := strconv.Atoi(os.Getenv("SEQD_TEST_PD_FAILOVER_CALLERS")); err == nil && n > 0 {
		callers = n // issue 27's measurement: 1000
	}
	errs, wait := hammer(pc, callers, &v, stop)
	waitCalls(t, &v, 2000)
	killed := time.Now()
	lead.kill()
	next := waitRole(t, ps, lead, adminclient.RoleLeader)
	leaderAt := time.Now()
	waitCalls(t, &v, 2000)
	close(stop)
	wait()
	if err := v.Check().Err(); err != nil {
		t.Fatal(err)
	}
	st := srv.Stats()
	t.Logf("verified %d PD client calls from %d callers across an HA failover (%s -> %s, new leader %v after the kill -9): %d failed (retried), front end %+v, seqd client reconnects %d",
		v.Len(), callers, lead.addr, next.addr, leaderAt.Sub(killed).Round(time.Millisecond), errs.Load(), st, c.Stats().Reconnects)
	if st.Refused != 0 {
		t.Fatalf("the floor refused %d ranges", st.Refused)
	}
}

// TestAmongOtherClients shares the seqd group between seqd-pd and native
// clients: every value either side got is checked together, so a range
// that held a native client's value would fail.
func TestAmongOtherClients(t *testing.T) {
	s := startSingle(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	c := dialSeqd(ctx, t, s.addr)
	srv, addr := startFront(t, pdfront.NewClientSource(c))
	pc := newPD(t, addr)
	var v verify.History
	stop := make(chan struct{})
	pdErrs, wait := hammer(pc, 50, &v, stop)
	// Native clients on the same group, callers 1000 and up.
	var wg sync.WaitGroup
	for i := range 4 {
		nc := dialSeqd(ctx, t, s.addr)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				start := time.Since(epoch)
				ts, err := nc.GetTimestamp(context.Background())
				if err != nil {
					continue
				}
				v.Record(1000+i, verify.Call{Start: start, End: time.Since(epoch), Value: uint64(ts)})
			}
		}()
	}
	for srv.Stats().Timestamps < 5000 {
		time.Sleep(10 * time.Millisecond)
	}
	close(stop)
	wait()
	wg.Wait()
	if err := v.Check().Err(); err != nil {
		t.Fatal(err)
	}
	t.Logf("verified %d calls (PD through seqd-pd and 4 native clients, on one seqd): %d PD calls failed (retried)", v.Len(), pdErrs.Load())
	if n := pdErrs.Load(); n != 0 {
		t.Fatalf("%d PD calls failed", n)
	}
}

// TestPDClientAcrossFrontEnds runs two seqd-pd instances (peers of each
// other) in front of one seqd, gives PD's client both, and stops the one
// it uses: it moves to the other, and every value is checked.
func TestPDClientAcrossFrontEnds(t *testing.T) {
	s := startSingle(t)
	var lis [2]net.Listener
	var urls []string
	for i := range lis {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lis[i], urls = l, append(urls, "http://"+l.Addr().String())
	}
	var gs [2]*grpc.Server
	var fronts [2]*pdfront.Server
	for i := range lis {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		c := dialSeqd(ctx, t, s.addr)
		cancel()
		srv, err := pdfront.New(pdfront.Config{ClusterID: 7, URL: urls[i], Peers: urls}, pdfront.NewClientSource(c))
		if err != nil {
			t.Fatal(err)
		}
		// WaitForHandlers: Stop returns once the handlers have returned
		// (by default only the connections are closed, and a Tso
		// handler finishing its batch then counted 23 timestamps after
		// the stop).
		fronts[i], gs[i] = srv, grpc.NewServer(grpc.WaitForHandlers(true))
		srv.RegisterGRPC(gs[i])
		go gs[i].Serve(lis[i])
		defer gs[i].Stop()
	}
	pc := newPD(t, lis[0].Addr().String(), lis[1].Addr().String())
	var v verify.History
	stop := make(chan struct{})
	errs, wait := hammer(pc, 50, &v, stop)
	// The front end in use is the one answering now (PD's client may
	// still be settling on its leader right after it starts).
	waitCalls(t, &v, 1000)
	a, b := fronts[0].Stats().Timestamps, fronts[1].Stats().Timestamps
	waitCalls(t, &v, 1000)
	used := 0
	if fronts[1].Stats().Timestamps-b > fronts[0].Stats().Timestamps-a {
		used = 1
	}
	gs[used].Stop() // returns when its connections are closed and its handlers have returned
	stopped := fronts[used].Stats().Timestamps
	otherBefore := fronts[1-used].Stats().Timestamps
	waitCalls(t, &v, 2000)
	close(stop)
	wait()
	if err := v.Check().Err(); err != nil {
		t.Fatal(err)
	}
	// The 2,000 calls after the stop came from the other front end. (PD's
	// client names its leader by a field it updates on its own schedule,
	// so which front end answered is read from the front ends.)
	if got := fronts[used].Stats().Timestamps; got != stopped {
		t.Errorf("the stopped front end %s answered %d timestamps after its stop", urls[used], got-stopped)
	}
	if got := fronts[1-used].Stats().Timestamps - otherBefore; got < 2000 {
		t.Errorf("after %s stopped, %s answered %d timestamps, want at least the 2000 calls made", urls[used], urls[1-used], got)
	}
	t.Logf("verified %d PD client calls across a front end's stop (%s -> %s): %d failed (retried); the PD client's leader field now %q",
		v.Len(), urls[used], urls[1-used], errs.Load(), pc.GetLeaderAddr())
}

// maxCountSource records the largest count reserved.
type maxCountSource struct {
	pdfront.Source
	max atomic.Int64
}

func (s *maxCountSource) Reserve(ctx context.Context, count int) (uint64, error) {
	for {
		m := s.max.Load()
		if int64(count) <= m || s.max.CompareAndSwap(m, int64(count)) {
			break
		}
	}
	return s.Source.Reserve(ctx, count)
}

// TestLargeCounts serves large Tso counts, up to PD's maximum batch and
// beyond, from seqd ranges. First raw Tso streams ask for explicit counts
// (1 … pdfront.MaxCount) concurrently, among native clients; then PD's
// unmodified client merges 10,000 concurrent GetTSAsync callers per round
// into batches as large as it makes them. Every value any of them got is
// checked together (unique, per-caller increasing, real-time ordered),
// and every answer's values share one millisecond: PD's
// (physical, logical) split holds for each, logical in [0, 2^18).
func TestLargeCounts(t *testing.T) {
	s := startSingle(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := dialSeqd(ctx, t, s.addr)
	src := &maxCountSource{Source: pdfront.NewClientSource(c)}
	srv, addr := startFront(t, src)
	var v verify.History
	record := func(caller int, start, end time.Duration, p, l int64, count int) {
		first := l - int64(count) + 1
		if l >= 1<<18 || first < 0 {
			t.Errorf("answer (%d, %d) for %d values: logical parts %d … %d leave [0, 2^18)", p, l, count, first, l)
		}
		for i := range int64(count) {
			v.Record(caller, verify.Call{Start: start, End: end, Value: compose(p, first+i)})
		}
	}
	// Raw streams with explicit counts, beside a native client.
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	counts := []int{1, 7, 1000, 10000, pdfront.MaxCount, 4096}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, err := pdpb.NewPDClient(cc).Tso(ctx)
			if err != nil {
				t.Error(err)
				return
			}
			defer st.CloseSend()
			for i := range 24 {
				count := counts[(g+i)%len(counts)]
				start := time.Since(epoch)
				if err := st.Send(&pdpb.TsoRequest{Header: &pdpb.RequestHeader{ClusterId: 7}, Count: uint32(count)}); err != nil {
					t.Error(err)
					return
				}
				r, err := st.Recv()
				if err != nil {
					t.Error(err)
					return
				}
				if int(r.Count) != count {
					t.Errorf("answer for %d values, asked %d", r.Count, count)
				}
				record(g, start, time.Since(epoch), r.Timestamp.Physical, r.Timestamp.Logical, count)
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range 2000 {
			start := time.Since(epoch)
			ts, err := c.GetTimestamp(ctx)
			if err != nil {
				t.Error(err)
				return
			}
			v.Record(100, verify.Call{Start: start, End: time.Since(epoch), Value: uint64(ts)})
		}
	}()
	wg.Wait()
	// PD's client: 10,000 callers at once per round.
	pc := newPD(t, addr)
	const callers = 10000
	for round := range 3 {
		type call struct {
			f     pd.TSFuture
			start time.Duration
		}
		calls := make([]call, callers)
		for i := range calls {
			calls[i] = call{pc.GetTSAsync(ctx), time.Since(epoch)}
		}
		for i, cl := range calls {
			p, l, err := cl.f.Wait()
			if err != nil {
				t.Fatalf("round %d caller %d: %v", round, i, err)
			}
			v.Record(1000+i, verify.Call{Start: cl.start, End: time.Since(epoch), Value: compose(p, l)})
		}
	}
	if t.Failed() {
		return
	}
	if err := v.Check().Err(); err != nil {
		t.Fatal(err)
	}
	st := srv.Stats()
	t.Logf("verified %d values (raw counts up to %d, PD's client batching %d callers: largest count %d), front end %+v",
		v.Len(), pdfront.MaxCount, callers, src.max.Load(), st)
	if st.Refused != 0 || st.Errors != 0 {
		t.Fatalf("front end %+v", st)
	}
	if src.max.Load() < int64(pdfront.MaxCount) {
		t.Fatalf("largest count %d, want %d", src.max.Load(), pdfront.MaxCount)
	}
}

// TestModeWithoutRanges: over a seqd in a mode without ranges (spec-s0)
// requests for one timestamp are served and larger counts fail with
// Unavailable, never with values pieced together.
func TestModeWithoutRanges(t *testing.T) {
	s := startProc(t, "-init", "-data", t.TempDir(), "-mode", "spec-s0") // the last -mode wins
	waitRole(t, []*proc{s}, nil, "")
	_, addr, _ := frontOver(t, []string{s.addr})
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ask := func(count uint32) (*pdpb.TsoResponse, error) {
		st, err := pdpb.NewPDClient(cc).Tso(ctx)
		if err != nil {
			return nil, err
		}
		defer st.CloseSend()
		if err := st.Send(&pdpb.TsoRequest{Header: &pdpb.RequestHeader{ClusterId: 7}, Count: count}); err != nil {
			return nil, err
		}
		return st.Recv()
	}
	r, err := ask(1)
	if err != nil || r.Count != 1 || r.Timestamp.Logical >= 1<<18 {
		t.Fatalf("count 1 in spec-s0: %v, %v", r, err)
	}
	if _, err := ask(2); status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "not supported") {
		t.Fatalf("count 2 in spec-s0: %v, want Unavailable naming the unsupported mode", err)
	}
}
