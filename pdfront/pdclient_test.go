package pdfront_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pingcap/kvproto/pkg/pdpb"
	pdlog "github.com/pingcap/log"
	pd "github.com/tikv/pd/client"
	"go.uber.org/zap/zapcore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/seqd/seqd/loadgen/verify"
	"github.com/seqd/seqd/pdfront"
)

func init() { pdlog.SetLevel(zapcore.ErrorLevel) } // PD's client logs every stream at info

// counterSource is a deliberately simple Source: a counter that jumps
// by count (every range is exactly reserved), optionally failing.
type counterSource struct {
	mu   sync.Mutex
	next uint64
	fail error
	back uint64 // if not 0, the next reservation returns this (a regression)
}

func (s *counterSource) Reserve(_ context.Context, count int) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		return 0, s.fail
	}
	if s.back != 0 {
		v := s.back
		s.back = 0
		return v, nil
	}
	s.next += uint64(count)
	return s.next, nil
}

// startFront serves a front end over src on a free loopback port.
func startFront(t testing.TB, src pdfront.Source) (*pdfront.Server, string) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := pdfront.New(pdfront.Config{ClusterID: 7, URL: "http://" + lis.Addr().String(), Timeout: 15 * time.Second}, src)
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	srv.RegisterGRPC(g)
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	return srv, lis.Addr().String()
}

// newPD is PD's unmodified Go client on addrs.
func newPD(t testing.TB, addrs ...string) pd.Client {
	t.Helper()
	c, err := pd.NewClientWithContext(context.Background(), addrs, pd.SecurityOption{},
		pd.WithCustomTimeoutOption(15*time.Second), pd.WithMaxErrorRetry(5))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// epoch is the one time base of every call a test records: calls timed
// from different bases could not be ordered against each other.
var epoch = time.Now()

// compose is PD's ComposeTS (oracle.ComposeTS in TiDB).
func compose(physical, logical int64) uint64 { return uint64(physical)<<18 + uint64(logical) }

// hammer runs callers goroutines that call GetTS (or GetTSAsync for odd
// callers) until stop closes, records every answer in v, and returns
// how many calls failed.
func hammer(c pd.Client, callers int, v *verify.History, stop <-chan struct{}) (errs *atomic.Uint64, wait func()) {
	errs = new(atomic.Uint64)
	var wg sync.WaitGroup
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				start := time.Since(epoch)
				var p, l int64
				var err error
				if i%2 == 0 {
					p, l, err = c.GetTS(ctx)
				} else {
					p, l, err = c.GetTSAsync(ctx).Wait()
				}
				end := time.Since(epoch)
				cancel()
				if err != nil {
					errs.Add(1)
					continue
				}
				v.Record(i, verify.Call{Start: start, End: end, Value: compose(p, l)})
			}
		}()
	}
	return errs, wg.Wait
}

func TestPDClientGetsVerifiedTimestamps(t *testing.T) {
	src := &counterSource{next: 1 << 40}
	srv, addr := startFront(t, src)
	c := newPD(t, addr)
	if id := c.GetClusterID(context.Background()); id != 7 {
		t.Fatalf("cluster ID %d, want 7", id)
	}
	if got := c.GetLeaderAddr(); got != "http://"+addr {
		t.Fatalf("leader %q, want http://%s", got, addr)
	}
	var v verify.History
	stop := make(chan struct{})
	errs, wait := hammer(c, 64, &v, stop)
	for v.Len() < 50000 {
		time.Sleep(10 * time.Millisecond)
	}
	close(stop)
	wait()
	if n := errs.Load(); n != 0 {
		t.Fatalf("%d calls failed", n)
	}
	if err := v.Check().Err(); err != nil {
		t.Fatal(err)
	}
	st := srv.Stats()
	if st.Timestamps < uint64(v.Len()) || st.Requests >= st.Timestamps {
		t.Fatalf("stats %+v for %d calls: want batching (fewer requests than timestamps)", st, v.Len())
	}
	t.Logf("%d calls in %d Tso requests", v.Len(), st.Requests)
}

func TestFloorRefusesRegression(t *testing.T) {
	src := &counterSource{next: 1 << 40}
	srv, addr := startFront(t, src)
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	pc := pdpb.NewPDClient(cc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ask := func(count uint32, cluster uint64) (*pdpb.TsoResponse, error) {
		st, err := pc.Tso(ctx)
		if err != nil {
			return nil, err
		}
		defer st.CloseSend()
		if err := st.Send(&pdpb.TsoRequest{Header: &pdpb.RequestHeader{ClusterId: cluster}, Count: count}); err != nil {
			return nil, err
		}
		return st.Recv()
	}
	r, err := ask(10, 7)
	if err != nil {
		t.Fatal(err)
	}
	if got := compose(r.Timestamp.Physical, r.Timestamp.Logical); got != 1<<40+10 || r.Count != 10 {
		t.Fatalf("last %d count %d, want %d 10", got, r.Count, uint64(1<<40+10))
	}
	src.back = 1<<40 + 15 // overlaps the range just answered
	if _, err := ask(10, 7); err == nil || !strings.Contains(err.Error(), "not above") {
		t.Fatalf("regression answered: %v", err)
	}
	if srv.Stats().Refused != 1 || srv.Floor() != 1<<40+10 {
		t.Fatalf("stats %+v floor %d", srv.Stats(), srv.Floor())
	}
	if _, err := ask(1, 8); err == nil || !strings.Contains(err.Error(), "cluster id") {
		t.Fatalf("foreign cluster ID answered: %v", err)
	}
	if _, err := ask(0, 7); err == nil {
		t.Fatal("count 0 answered")
	}
	src.fail = errors.New("seqd down")
	if _, err := ask(1, 7); err == nil || !strings.Contains(err.Error(), "seqd down") {
		t.Fatalf("source failure: %v", err)
	}
}
