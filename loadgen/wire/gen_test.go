//go:build linux

package wire

import (
	"context"
	"log/slog"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/seqd/seqd/admin/adminclient"
	"github.com/seqd/seqd/admin/adminpb"
	"github.com/seqd/seqd/server"
	_ "github.com/seqd/seqd/verbs/soft"
)

// startSeqd runs seqd in-process (one worker, Spec-S0) and returns its
// admin client.
func startSeqd(t *testing.T) adminpb.AdminClient {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan server.Addrs, 1)
	done := make(chan error, 1)
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	go func() {
		done <- server.Run(ctx, server.Config{Device: "127.0.0.1:0", Admin: "127.0.0.1:0", Metrics: "off", Data: t.TempDir(),
			Init: true, Mode: "spec-s0"}, quiet, func(a server.Addrs) { ready <- a })
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
	adm := startSeqd(t)
	for _, flows := range []int{1, 64} {
		t.Run("flows="+itoa(flows), func(t *testing.T) {
			g, err := New(Config{Flows: flows, Window: max(4, 256/flows), Keep: 1 << 20})
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close()
			ctx := context.Background()
			ss, err := Admit(ctx, adm, g, 0, "wire-test")
			if err != nil {
				t.Fatal(err)
			}
			defer ss.Close(ctx)
			var phases []bool
			res, err := g.Run(ctx, 100*time.Millisecond, 300*time.Millisecond, func(s bool) { phases = append(phases, s) })
			if err != nil {
				t.Fatalf("run: %v (%+v)", err, res.Stats)
			}
			t.Logf("flows=%d: %.3f Mops/s, %+v", flows, res.OpsPerSec()/1e6, res.Stats)
			if res.Measured == 0 || res.OpsPerSec() <= 0 {
				t.Fatalf("no answers measured: %+v", res.Stats)
			}
			if res.Kept == 0 || res.Forged != 0 || res.BadICRC != 0 || res.Malformed != 0 {
				t.Fatalf("answers not all verified: %+v", res.Stats)
			}
			if len(phases) != 2 || !phases[0] || phases[1] {
				t.Fatalf("phases %v", phases)
			}
		})
	}
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
		for _, flows := range []int{1, 64} {
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
				g, err := New(Config{Flows: flows, Window: max(4, 256/flows), Keep: 1 << 10})
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
				if res.Measured == 0 || res.Forged+res.BadICRC+res.Malformed+res.Stale != 0 {
					t.Fatalf("%+v", res.Stats)
				}
			})
		}
	}
}

var floorCore = envInt("WIRE_FLOOR_CORE", -1)

func envInt(k string, d int) int {
	if v, err := strconv.Atoi(os.Getenv(k)); err == nil {
		return v
	}
	return d
}
