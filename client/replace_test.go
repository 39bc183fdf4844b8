package client

import (
	"bytes"
	"context"
	"log/slog"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seqd/seqd/admin"
	"github.com/seqd/seqd/admin/adminclient"
	"github.com/seqd/seqd/admin/adminpb"
	"github.com/seqd/seqd/admin/admintest"
	"github.com/seqd/seqd/verbs"
)

// silentBackend admits clients to a data path that never answers (its
// QPs are at 127.0.0.1:9, the discard port), so that the client's calls
// wait and its engine probes Status. slow Status calls take longer than
// the client's probe timeout; epoch is what Status and Connect report.
type silentBackend struct {
	*admintest.Backend
	epoch    atomic.Uint64
	slow     atomic.Int32
	statuses atomic.Int32
}

func (b *silentBackend) Connect(ctx context.Context, req *adminpb.ConnectRequest) (*adminpb.ConnectResponse, error) {
	resp, err := b.Backend.Connect(ctx, req)
	if err != nil {
		return nil, err
	}
	a, _ := verbs.Address{GID: verbs.GIDFromAddr(netip.MustParseAddr("127.0.0.1")), Port: 9}.MarshalBinary()
	ep := &adminpb.Endpoint{Address: a, Qpn: 0x100}
	resp.ServerQps, resp.AnswerQps, resp.AnswerQkey, resp.Epoch = []*adminpb.Endpoint{ep}, []*adminpb.Endpoint{ep}, 0x1234, b.epoch.Load()
	for i := range resp.Assignment {
		resp.Assignment[i] = 0
	}
	return resp, nil
}

func (b *silentBackend) Status(ctx context.Context) (*adminpb.StatusResponse, error) {
	b.statuses.Add(1)
	if b.slow.Add(-1) >= 0 {
		select {
		case <-time.After(2 * dialAttempt):
		case <-ctx.Done():
		}
	}
	st, err := b.Backend.Status(ctx)
	if st != nil {
		st.Epoch = b.epoch.Load()
	}
	return st, err
}

// TestReconnectNamesItsSession: every Connect names the session it
// replaces: the first the client's own random handle, a reconnect the
// token of the session it had. A Status probe that times out (a server
// busy admitting others) does not make the client give up its session;
// probes that keep timing out, or a new epoch, do.
func TestReconnectNamesItsSession(t *testing.T) {
	be := &silentBackend{Backend: admintest.NewBackend(nil)}
	be.epoch.Store(7)
	_, addr := admintest.Start(t, admin.Config{Logger: slog.New(slog.DiscardHandler)}, be)
	c := dialT(t, addr, WithQPs(1))
	conns := func() []*adminpb.ConnectRequest { return be.Connects() }
	first := conns()
	if len(first) != 1 || len(first[0].GetReplaces()) != adminclient.TokenLen || bytes.Equal(first[0].GetReplaces(), c.sess.token) {
		t.Fatalf("first Connect names %x (token %x): want the client's own 16-byte handle", first[0].GetReplaces(), c.sess.token)
	}
	tok := bytes.Clone(c.sess.token)

	// Calls that get no answer make the engine probe. Two slow probes,
	// then fast ones of the same epoch: the session stays.
	be.slow.Store(slowProbesBeforeReconnect - 1)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	calls := make(chan error, 1)
	go func() {
		_, err := c.GetTimestamp(ctx)
		calls <- err
	}()
	waitFor(t, func() bool { return be.statuses.Load() >= slowProbesBeforeReconnect+3 }, "probes")
	if n := len(conns()); n != 1 {
		t.Fatalf("%d Connects after %d slow probes and fast ones of the same epoch, want 1 (the session kept)", n, slowProbesBeforeReconnect-1)
	}
	// Probes that keep timing out: the client reconnects, naming its
	// session.
	be.slow.Store(1 << 20)
	waitFor(t, func() bool { return len(conns()) >= 2 }, "a reconnect after slow probes")
	be.slow.Store(0)
	if r := conns()[1].GetReplaces(); !bytes.Equal(r, tok) {
		t.Fatalf("reconnect after slow probes names %x, want the session's token %x", r, tok)
	}
	// A new epoch: reconnect, naming the latest session.
	waitFor(t, func() bool { return len(c.lease.cur.Load().token) != 0 && !bytes.Equal(c.lease.cur.Load().token, tok) }, "the new session")
	tok2 := bytes.Clone(c.lease.cur.Load().token)
	n := len(conns())
	be.epoch.Store(8)
	waitFor(t, func() bool { return len(conns()) > n }, "a reconnect after the epoch changed")
	if r := conns()[n].GetReplaces(); !bytes.Equal(r, tok2) {
		t.Fatalf("reconnect after an epoch change names %x, want the last session's token %x", r, tok2)
	}
	cancel()
	<-calls
}

// waitFor polls cond for up to 15s.
func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
