package haserve_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/seqd/seqd/admin"
	"github.com/seqd/seqd/admin/adminclient"
	"github.com/seqd/seqd/admin/adminpb"
	"github.com/seqd/seqd/client"
	"github.com/seqd/seqd/ha"
	"github.com/seqd/seqd/ha/haserve"
	"github.com/seqd/seqd/ha/hatest"
	"github.com/seqd/seqd/modes"
	"github.com/seqd/seqd/spec"
	"github.com/seqd/seqd/verbs"
)

// member is one in-process instance of a group on prefix.
type member struct {
	srv    *haserve.Server
	node   *ha.Node
	addr   string
	cancel context.CancelFunc
	done   chan struct{}
}

// startMember starts an instance whose -mode is mode.
func startMember(t *testing.T, eps []string, prefix string, init bool, mode string) *member {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	node, err := ha.New(ha.Config{Endpoints: eps, Prefix: prefix, Advertise: lis.Addr().String(), TTL: time.Second,
		Logger: quiet, Init: init})
	if err != nil {
		t.Fatal(err)
	}
	dev, err := verbs.Open("soft", "127.0.0.1:0", verbs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := haserve.New(haserve.Config{Node: node, Mode: mode, Modes: modes.Config{Device: dev, Logger: quiet}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	adm, err := admin.New(admin.Config{Logger: quiet, Modes: modes.All}, srv)
	if err != nil {
		t.Fatal(err)
	}
	go adm.Serve(lis)
	ctx, cancel := context.WithCancel(context.Background())
	m := &member{srv: srv, node: node, addr: lis.Addr().String(), cancel: cancel, done: make(chan struct{})}
	go func() { defer close(m.done); srv.Run(ctx) }()
	t.Cleanup(func() { m.stop(); adm.Stop(); node.Close(); dev.Close() })
	return m
}

// stop resigns: a standby wins at once.
func (m *member) stop() { m.cancel(); <-m.done }

// crash cuts the member off etcd first, so that it cannot revoke its
// lease, which must expire: a leader that vanished.
func (m *member) crash() { m.node.Close(); m.stop() }

func leaderOf(t *testing.T, ms ...*member) *member {
	t.Helper()
	in := make([]*instance, len(ms))
	for i, m := range ms {
		in[i] = &instance{srv: m.srv}
	}
	l := waitLeader(t, in...)
	for i := range in {
		if in[i] == l {
			return ms[i]
		}
	}
	return nil
}

// servedIn checks that the group serves a client in mode, above after.
func servedIn(t *testing.T, ms []*member, mode string, after uint64) uint64 {
	t.Helper()
	var addrs []string
	for _, m := range ms {
		addrs = append(addrs, m.addr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cl, err := client.Dial(ctx, strings.Join(addrs, ","), client.WithDevice("soft", "127.0.0.1:0", ""),
		client.WithLogger(quiet), client.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer cl.Close()
	last := after
	for range 20 {
		ts, err := cl.GetTimestamp(ctx)
		if err != nil {
			t.Fatalf("GetTimestamp in %s: %v", mode, err)
		}
		if uint64(ts) <= last {
			t.Fatalf("%d after %d", uint64(ts), last)
		}
		last = uint64(ts)
	}
	if cl.Mode() != mode {
		t.Fatalf("client served in %q, want %q", cl.Mode(), mode)
	}
	return last
}

func modeOf(t *testing.T, m *member) string {
	t.Helper()
	st, err := m.srv.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st.GetMode()
}

// TestGroupKeepsMode is item 1 of issue 27, in process: for every mode an
// HA group runs, after SetMode the group's next leader starts in that
// mode, whether the leader vanished (its lease expires), handed over
// (transfer), or the whole group restarted (no -init), whatever the
// instances' own -mode, and clients are served in it.
func TestGroupKeepsMode(t *testing.T) {
	c := hatest.Start(t, 1)
	eps := c.Endpoints()
	for _, mode := range haserve.Modes {
		for _, event := range []string{"crash", "transfer", "group-restart"} {
			t.Run(mode+"/"+event, func(t *testing.T) {
				prefix := "/" + t.Name()
				// Every instance's -mode is another one: only the
				// stored mode can bring the group back to mode.
				flag := spec.ModeSpecS0
				if mode == spec.ModeSpecS0 {
					flag = spec.ModeHERD
				}
				ms := []*member{startMember(t, eps, prefix, true, flag), startMember(t, eps, prefix, true, flag)}
				lead := leaderOf(t, ms...)
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				if _, err := lead.srv.SetMode(ctx, &adminpb.SetModeRequest{Mode: mode}); err != nil {
					t.Fatalf("SetMode(%s): %v", mode, err)
				}
				last := servedIn(t, ms, mode, 0)
				switch event {
				case "crash":
					lead.crash()
				case "transfer":
					// On a loaded host the lease may have moved since
					// leaderOf (a missed beat): then transfer from the
					// member that leads now.
					for {
						_, err := lead.srv.TransferLeader(ctx)
						if err == nil {
							break
						}
						if _, moved := adminclient.LeaderFromError(err); !moved || ctx.Err() != nil {
							t.Fatalf("TransferLeader: %v", err)
						}
						lead = leaderOf(t, ms...)
					}
				case "group-restart":
					for _, m := range ms {
						m.stop()
					}
					ms = []*member{startMember(t, eps, prefix, false, flag), startMember(t, eps, prefix, false, flag)}
				}
				var rest []*member
				for _, m := range ms {
					if m != lead {
						rest = append(rest, m)
					}
				}
				next := leaderOf(t, rest...)
				if got := modeOf(t, next); got != mode {
					t.Fatalf("after %s the new leader serves %q, want %q", event, got, mode)
				}
				servedIn(t, rest, mode, last)
			})
		}
	}
}
