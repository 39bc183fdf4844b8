package server

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seqd/seqd/admin/adminclient"
	"github.com/seqd/seqd/admin/adminpb"
	"github.com/seqd/seqd/client"
	"github.com/seqd/seqd/ha"
	"github.com/seqd/seqd/ha/hatest"
)

// haRun is one in-process HA instance started by Run.
type haRun struct {
	addrs  Addrs
	cancel context.CancelFunc
	err    chan error // Run's result
}

// startHA runs seqd on c (an HA instance, or a single one). It returns once the admin
// plane listens, or once Run has returned (refused: addrs is zero).
func startHA(t *testing.T, c Config) *haRun {
	t.Helper()
	c.Device, c.Admin, c.Metrics = "127.0.0.1:0", "127.0.0.1:0", "off"
	if c.Data == "" {
		c.Data = t.TempDir()
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &haRun{cancel: cancel, err: make(chan error, 1)}
	ready := make(chan Addrs, 1)
	go func() { r.err <- Run(ctx, c, quiet, func(a Addrs) { ready <- a }) }()
	t.Cleanup(func() { r.stop() })
	select {
	case r.addrs = <-ready:
	case err := <-r.err:
		r.err <- err
	case <-time.After(20 * time.Second):
		t.Fatal("seqd did not start within 20s")
	}
	return r
}

// stop stops the instance and returns Run's error.
func (r *haRun) stop() error {
	r.cancel()
	err := <-r.err
	r.err <- err
	return err
}

// refused waits for Run to return and checks that it refused to start
// without a mark, naming the endpoints, the prefix and both ways out.
func (r *haRun) refused(t *testing.T, eps []string, prefix string) {
	t.Helper()
	var err error
	select {
	case err = <-r.err:
		r.err <- err
	case <-time.After(30 * time.Second):
		t.Fatal("seqd did not refuse within 30s: it serves without a mark")
	}
	if !errors.Is(err, ha.ErrNoMark) {
		t.Fatalf("Run = %v; want ha.ErrNoMark", err)
	}
	for _, s := range append(eps, prefix, "-init", "-advance VALUE", "-etcd-prefix") {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("refusal %q does not name %q", err, s)
		}
	}
}

// waitLeader waits until the instance serves: an HA instance leads.
func (r *haRun) waitLeader(t *testing.T) {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		select {
		case err := <-r.err:
			r.err <- err
			t.Fatalf("seqd stopped: %v", err)
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		cc, err := adminclient.Dial(ctx, r.addrs.Admin)
		if err == nil {
			st, err := adminpb.NewAdminClient(cc).Status(ctx, &adminpb.StatusRequest{})
			cc.Close()
			if err == nil && st.GetRole() != adminclient.RoleStandby { // the HA leader, or a single seqd
				cancel()
				return
			}
		}
		cancel()
	}
	t.Fatal("seqd did not serve within 15s")
}

// values gets n values from the instance and checks them above after.
func (r *haRun) values(t *testing.T, n int, after uint64) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r.waitLeader(t)
	cl, err := client.Dial(ctx, r.addrs.Admin, client.WithDevice("soft", "127.0.0.1:0", ""), client.WithLogger(quiet),
		client.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatalf("dial %s: %v", r.addrs.Admin, err)
	}
	defer cl.Close()
	last := after
	for range n {
		ts, err := cl.GetTimestamp(ctx)
		if err != nil {
			t.Fatalf("GetTimestamp: %v", err)
		}
		if uint64(ts) <= last {
			t.Fatalf("got %d, not above %d: a value served again", uint64(ts), last)
		}
		last = uint64(ts)
	}
	return last
}

// TestHAMissingMarkRefused is item 2 of issue 27: an HA group whose mark
// is missing in etcd serves only with consent: -init (a new group) or
// -advance VALUE (a recovery). A mistyped -etcd-prefix and a wiped etcd
// each stop seqd with an error naming the endpoints, the prefix and both
// ways out, in both formats; -init on an existing mark loads it; a group
// started with consent whose etcd is wiped while it runs stops too.
func TestHAMissingMarkRefused(t *testing.T) {
	for _, format := range []string{"counter", "hybrid"} {
		t.Run(format, func(t *testing.T) {
			etcd := hatest.Start(t, 1)
			eps := etcd.Endpoints()
			cli := etcd.Client()
			cfg := func(prefix string) Config {
				return Config{Format: format, HA: HAConfig{EtcdEndpoints: strings.Join(eps, ","), EtcdPrefix: prefix}}
			}
			withInit := func(prefix string) Config { c := cfg(prefix); c.Init = true; return c }
			// group serves a new group on prefix with -init, stops it
			// and returns the last value served.
			group := func(t *testing.T, prefix string) uint64 {
				r := startHA(t, withInit(prefix))
				last := r.values(t, 20, 0)
				if err := r.stop(); err != nil {
					t.Fatalf("stop: %v", err)
				}
				return last
			}
			wipe := func(t *testing.T, prefix string) {
				if _, err := cli.Delete(context.Background(), prefix, clientv3.WithPrefix()); err != nil {
					t.Fatal(err)
				}
			}

			t.Run("new-group", func(t *testing.T) {
				const prefix = "/new"
				startHA(t, cfg(prefix)).refused(t, eps, prefix)
				last := group(t, prefix)
				// -init again: the mark exists and is loaded, never
				// overwritten; then no flag at all.
				r := startHA(t, withInit(prefix))
				last = r.values(t, 20, last)
				r.stop()
				startHA(t, cfg(prefix)).values(t, 20, last)
			})

			t.Run("mistyped-prefix", func(t *testing.T) {
				const prefix = "/typo"
				group(t, prefix)
				startHA(t, cfg(prefix+"s")).refused(t, eps, prefix+"s")
				if resp, err := cli.Get(context.Background(), prefix+"s/mark"); err != nil || len(resp.Kvs) != 0 {
					t.Fatalf("mark under the mistyped prefix: %v, %v", resp, err)
				}
			})

			t.Run("wiped-etcd", func(t *testing.T) {
				const prefix = "/wiped"
				last := group(t, prefix)
				wipe(t, prefix)
				startHA(t, cfg(prefix)).refused(t, eps, prefix)
				// The recovery: -advance VALUE serves above VALUE.
				c := cfg(prefix)
				c.Advance = last
				startHA(t, c).values(t, 20, last)
			})

			// Wiped while running with -init: the consent ended when the
			// mark was written; seqd stops rather than start over, and a
			// client already connected gets nothing at or below the
			// values served before.
			t.Run("wiped-while-running", func(t *testing.T) {
				const prefix = "/running"
				r := startHA(t, withInit(prefix))
				last := r.values(t, 20, 0)
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				cl, err := client.Dial(ctx, r.addrs.Admin, client.WithDevice("soft", "127.0.0.1:0", ""), client.WithLogger(quiet),
					client.WithTimeout(300*time.Millisecond))
				if err != nil {
					t.Fatalf("dial: %v", err)
				}
				defer cl.Close()
				wipe(t, prefix)
				for {
					select {
					case err := <-r.err:
						r.err <- err
						r.refused(t, eps, prefix)
						return
					case <-ctx.Done():
						t.Fatal("seqd still runs 30s after its etcd was wiped")
					default:
					}
					cctx, ccancel := context.WithTimeout(ctx, 500*time.Millisecond)
					ts, err := cl.GetTimestamp(cctx)
					ccancel()
					if err == nil && uint64(ts) <= last {
						t.Fatalf("after the wipe got %d, not above %d: a value served again", uint64(ts), last)
					} else if err == nil {
						last = uint64(ts)
					}
				}
			})
		})
	}
}
