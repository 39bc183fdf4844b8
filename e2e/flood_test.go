package e2e

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seqd/seqd/admin/adminclient"
	"github.com/seqd/seqd/admin/adminpb"
	"github.com/seqd/seqd/client"
	"github.com/seqd/seqd/headeronly"
	"github.com/seqd/seqd/internal/worker"
	"github.com/seqd/seqd/loadgen/verify"
	"github.com/seqd/seqd/server"
)

// fromAddr makes every admin dial leave from the loopback address local:
// another peer than 127.0.0.1, for the admission quotas.
func fromAddr(local string) grpc.DialOption {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}}
	return grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) {
		return d.DialContext(ctx, "tcp", a)
	})
}

// dialFrom is a client of addr whose admin connection and data path are
// both on the loopback address local.
func dialFrom(t testing.TB, ctx context.Context, addr, local string) *client.Client {
	t.Helper()
	c, err := client.Dial(ctx, addr, client.WithDevice("soft", local+":0", ""), client.WithAdminDialOptions(fromAddr(local)),
		client.WithQPs(1), client.WithWindow(64), client.WithName("honest-"+local), client.WithLogger(quietLogger()))
	if err != nil {
		t.Fatalf("honest client on %s: %v", local, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// flooder opens sessions as fast as it can: 16 QPs × window 256 first,
// and, when refused, ever smaller ones (down to 1 QP × window 1, where it
// keeps trying), so that it takes every receive it can get.
type flooder struct {
	adm               adminpb.AdminClient
	qpn               *atomic.Uint32
	admitted, refused atomic.Int64
	quota, other      atomic.Int64 // refusals naming a quota flag; other errors
	recvQuota         atomic.Int64 // refusals naming a receive quota (-peer-max-recv, -identity-max-recv)
	maxRecv           atomic.Int64 // the most receives (QPs × window) one session got
	recv              atomic.Int64 // the receives of every session it got
	firstOther        atomic.Pointer[error]
}

func (f *flooder) run(ctx context.Context, port uint16, stop <-chan struct{}) {
	qps, window := 16, 256
	for {
		select {
		case <-stop:
			return
		default:
		}
		req := syntheticConnect(port, f.qpn.Add(1), uint32(window))
		for range qps - 1 {
			req.Qps = append(req.Qps, &adminpb.Endpoint{Address: req.Qps[0].Address, Qpn: f.qpn.Add(1)})
		}
		resp, err := f.adm.Connect(ctx, req)
		switch {
		case err == nil:
			f.admitted.Add(1)
			r := int64(qps) * int64(resp.GetWindow())
			f.recv.Add(r)
			if r > f.maxRecv.Load() {
				f.maxRecv.Store(r)
			}
		case status.Code(err) == codes.ResourceExhausted:
			f.refused.Add(1)
			if strings.Contains(err.Error(), "-peer-") || strings.Contains(err.Error(), "-identity-") {
				f.quota.Add(1)
			}
			if strings.Contains(err.Error(), "-max-recv") {
				f.recvQuota.Add(1)
			}
			if qps > 1 {
				qps /= 2
			} else if window > 1 {
				window /= 2
			}
		case ctx.Err() != nil:
			return
		default:
			f.other.Add(1)
			f.firstOther.CompareAndSwap(nil, &err)
		}
	}
}

// latencies makes n calls on c and returns each call's latency; every
// value is recorded in v (as caller) for the order check.
func latencies(ctx context.Context, c *client.Client, n, caller int, v *verify.History, origin time.Time) ([]time.Duration, error) {
	out := make([]time.Duration, 0, n)
	for range n {
		start := time.Since(origin)
		ts, err := c.GetTimestamp(ctx)
		end := time.Since(origin)
		if err != nil {
			return out, err
		}
		out = append(out, end-start)
		v.Record(caller, verify.Call{Start: start, End: end, Value: uint64(ts)})
	}
	return out, nil
}

func p99(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)*99/100]
}

// TestFloodCannotLockOut (issue 26, item 4): flooders, from one host
// without a token and with one, open sessions as fast as they can, each
// greedily taking every receive it can get, and keep them. With seqd's
// DEFAULT admission quotas (no flag set) each is held to its peer's or
// its identity's receives (-peer-max-recv, -identity-max-recv: a quarter
// of the workers' receive budget each), each session to its cap
// (-max-session-recv); an honest client on another host is admitted
// during the flood and served, and one admitted before keeps being
// served. Without the receive quotas (-peer-max-recv -1
// -identity-max-recv -1) the flooders take every receive and the honest
// client's Connect is refused (ResourceExhausted). The first honest
// client's p99 latency, alone and during the flood (the same client, the
// same number of calls), is logged.
func TestFloodCannotLockOut(t *testing.T) {
	const workers = 1
	var (
		recvQuota   = server.DefaultMaxRecv(workers)
		sessionRecv = headeronly.DefaultMaxRecv / worker.SessionShare
	)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	tokens := filepath.Join(t.TempDir(), "tokens")
	const floodToken = "flood-token-0123456789"
	if err := os.WriteFile(tokens, []byte(floodToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Every quota at its default. No session lease: the flooders never
	// renew, and on a loaded host the test outlasts the default 30 s lease,
	// so that seqd rightly reclaims their first sessions and admits new
	// ones, and a flooder's count of what it got is no longer what it
	// holds.
	addr := startConfig(t, server.Config{Workers: workers, SessionLease: -1, Security: server.SecurityConfig{TokenFile: tokens}})
	origin := time.Now()
	var v verify.History
	a := dialFrom(t, ctx, addr, "127.0.0.2")
	const calls = 2000
	before, err := latencies(ctx, a, calls, 0, &v, origin)
	if err != nil {
		t.Fatalf("honest client before the flood: %v", err)
	}

	var qpn atomic.Uint32
	dial := func(opts ...grpc.DialOption) adminpb.AdminClient {
		cc, err := adminclient.Dial(ctx, addr, opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		return adminpb.NewAdminClient(cc)
	}
	anon := &flooder{adm: dial(), qpn: &qpn}
	withToken := &flooder{adm: dial(grpc.WithPerRPCCredentials(adminclient.BearerToken(floodToken, true))), qpn: &qpn}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i, f := range []*flooder{anon, anon, withToken, withToken} {
		wg.Add(1)
		go func() { defer wg.Done(); f.run(ctx, uint16(40000+i), stop) }()
	}
	defer func() { close(stop); wg.Wait() }()
	// The flood has filled what it can: both flooders are being refused
	// at their smallest sessions.
	waitFor(t, 30*time.Second, func() bool { return anon.refused.Load() > 20 && withToken.refused.Load() > 20 }, "both flooders refused")
	flooding := anon.admitted.Load() + withToken.admitted.Load()

	b := dialFrom(t, ctx, addr, "127.0.0.3") // admitted during the flood
	if _, err := latencies(ctx, b, calls/4, 1, &v, origin); err != nil {
		t.Fatalf("honest client admitted during the flood: %v", err)
	}
	during, err := latencies(ctx, a, calls, 0, &v, origin) // as before, the flood going on
	if err != nil {
		t.Fatalf("honest client admitted before the flood, during it: %v", err)
	}
	if err := v.Check().Err(); err != nil {
		t.Fatal(err)
	}
	for _, f := range []*flooder{anon, withToken} {
		if p := f.firstOther.Load(); p != nil {
			t.Errorf("flooder: %d errors other than ResourceExhausted, first %v", f.other.Load(), *p)
		}
	}
	if n := anon.recv.Load(); n > int64(recvQuota) {
		t.Errorf("the flooder without a token holds %d receives, its peer quota is %d", n, recvQuota)
	}
	if n := withToken.recv.Load(); n > int64(recvQuota) {
		t.Errorf("the flooder with a token holds %d receives, its identity quota is %d", n, recvQuota)
	}
	if anon.recvQuota.Load() == 0 || withToken.recvQuota.Load() == 0 {
		t.Errorf("refusals naming a receive quota: %d without a token, %d with; want some of each", anon.recvQuota.Load(), withToken.recvQuota.Load())
	}
	for _, f := range []*flooder{anon, withToken} {
		if r := f.maxRecv.Load(); r > int64(sessionRecv) {
			t.Errorf("a flooder session holds %d receives, the per-session cap is %d", r, sessionRecv)
		}
	}
	t.Logf("flood: %d sessions held when the second honest client connected, %d in the end (%d without a token, %d with; "+
		"%d + %d receives of %d); %d + %d refusals (%d + %d naming a quota, %d + %d a receive quota); honest client's p99 over %d calls: %v alone, %v during the flood",
		flooding, anon.admitted.Load()+withToken.admitted.Load(), anon.admitted.Load(), withToken.admitted.Load(),
		anon.recv.Load(), withToken.recv.Load(), workers*headeronly.DefaultMaxRecv,
		anon.refused.Load(), withToken.refused.Load(), anon.quota.Load(), withToken.quota.Load(),
		anon.recvQuota.Load(), withToken.recvQuota.Load(), calls, p99(before), p99(during))
}
