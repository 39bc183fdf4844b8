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

	"github.com/seqd/seqd/admin"
	"github.com/seqd/seqd/admin/adminclient"
	"github.com/seqd/seqd/admin/adminpb"
	"github.com/seqd/seqd/client"
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
	maxRecv           atomic.Int64 // the most receives (QPs × window) one session got
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
			if r := int64(qps) * int64(resp.GetWindow()); r > f.maxRecv.Load() {
				f.maxRecv.Store(r)
			}
		case status.Code(err) == codes.ResourceExhausted:
			f.refused.Add(1)
			if strings.Contains(err.Error(), "-peer-") || strings.Contains(err.Error(), "-identity-") {
				f.quota.Add(1)
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
func latencies(ctx context.Context, c *client.Client, n, caller int, v *Verifier, origin time.Time) ([]time.Duration, error) {
	out := make([]time.Duration, 0, n)
	for range n {
		start := time.Since(origin)
		ts, err := c.GetTimestamp(ctx)
		end := time.Since(origin)
		if err != nil {
			return out, err
		}
		out = append(out, end-start)
		v.Record(Call{Caller: caller, Start: start, End: end, Value: uint64(ts)})
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
// greedily taking every receive it can get, and keep them. With
// admission quotas they are held to their peer's and their identity's
// sessions, each session to its cap of receives; an honest client on
// another host is admitted during the flood and served, and one admitted
// before keeps being served. Without quotas the flooders take every
// receive and the honest client's Connect is refused (ResourceExhausted).
// The first honest client's p99 latency, alone and during the flood
// (the same client, the same number of calls), is logged.
func TestFloodCannotLockOut(t *testing.T) {
	const (
		peerSessions  = 4
		identSessions = 4
		sessionRecv   = 2048
	)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	tokens := filepath.Join(t.TempDir(), "tokens")
	const floodToken = "flood-token-0123456789"
	if err := os.WriteFile(tokens, []byte(floodToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := startConfig(t, server.Config{Workers: 1, MaxWindow: 256, MaxSessionRecv: sessionRecv,
		PeerMaxSessions: peerSessions, IdentityMaxSessions: identSessions,
		Security: server.SecurityConfig{TokenFile: tokens}})
	origin := time.Now()
	var v Verifier
	a := dialFrom(t, ctx, addr, "127.0.0.2")
	const calls = 2000
	before, err := latencies(ctx, a, calls, 0, &v, origin)
	if err != nil {
		t.Fatalf("honest client before the flood: %v", err)
	}

	var qpn atomic.Uint32
	dial := func(opts ...grpc.DialOption) adminpb.AdminClient {
		cc, err := admin.Dial(ctx, addr, opts...)
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
	if err := v.Check(); err != nil {
		t.Fatal(err)
	}
	for _, f := range []*flooder{anon, withToken} {
		if p := f.firstOther.Load(); p != nil {
			t.Errorf("flooder: %d errors other than ResourceExhausted, first %v", f.other.Load(), *p)
		}
	}
	if n := anon.admitted.Load(); n > peerSessions {
		t.Errorf("the flooder without a token holds %d sessions, its peer quota is %d", n, peerSessions)
	}
	if n := withToken.admitted.Load(); n > identSessions {
		t.Errorf("the flooder with a token holds %d sessions, its identity quota is %d", n, identSessions)
	}
	for _, f := range []*flooder{anon, withToken} {
		if r := f.maxRecv.Load(); r > sessionRecv {
			t.Errorf("a flooder session holds %d receives, the per-session cap is %d", r, sessionRecv)
		}
	}
	t.Logf("flood: %d sessions held when the second honest client connected, %d in the end (%d without a token, %d with); "+
		"%d + %d refusals (%d + %d naming a quota); honest client's p99 over %d calls: %v alone, %v during the flood",
		flooding, anon.admitted.Load()+withToken.admitted.Load(), anon.admitted.Load(), withToken.admitted.Load(),
		anon.refused.Load(), withToken.refused.Load(), anon.quota.Load(), withToken.quota.Load(), calls, p99(before), p99(during))
}
