package admin_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seqd/seqd/admin"
	"github.com/seqd/seqd/admin/adminclient"
	"github.com/seqd/seqd/admin/adminpb"
	"github.com/seqd/seqd/admin/admintest"
)

// blockingBackend holds every Connect until release is closed, and
// reports each one's arrival on entered.
type blockingBackend struct {
	*admintest.Backend
	entered chan struct{}
	release chan struct{}
}

func (b *blockingBackend) Connect(ctx context.Context, req *adminpb.ConnectRequest) (*adminpb.ConnectResponse, error) {
	b.entered <- struct{}{}
	select {
	case <-b.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return b.Backend.Connect(ctx, req)
}

// With DefaultMaxConnects Connects in hand, the next waits only briefly
// for a slot and is then refused with Unavailable and a retry-after
// (RetryInfo) within the bounds; once they are done, Connects are
// admitted again. In a connect storm this
// keeps the instance's run queue short (the HA election's goroutines
// queue behind every runnable one).
func TestConnectAdmissionSheds(t *testing.T) {
	b := &blockingBackend{Backend: admintest.NewBackend(nil), entered: make(chan struct{}), release: make(chan struct{})}
	_, addr := admintest.Start(t, admin.Config{Logger: quietLogger(), PeerQuota: admin.Quota{MaxSessions: -1, ConnectRate: -1}}, b)
	ctx := testCtx(t)
	cc, err := adminclient.Dial(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	c := adminpb.NewAdminClient(cc)
	var wg sync.WaitGroup
	errs := make(chan error, admin.DefaultMaxConnects)
	for range admin.DefaultMaxConnects {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := c.Connect(ctx, admin.ValidConnect())
			errs <- err
		}()
	}
	for range admin.DefaultMaxConnects {
		<-b.entered // every one of them is in hand
	}
	// The next one: refused, not queued until the others are done. On an
	// instance that queued it, it would wait for the release and run
	// into this deadline.
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	go func() { // a Connect that reached the backend would block there
		select {
		case <-b.entered:
			t.Error("a Connect beyond the bound reached the backend")
		case <-qctx.Done():
		}
	}()
	_, err = c.Connect(qctx, admin.ValidConnect())
	cancel()
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("Connect beyond %d in hand: %v, want Unavailable with a retry-after", admin.DefaultMaxConnects, err)
	}
	after, ok := adminclient.RetryAfter(err)
	if !ok || after < 20*time.Millisecond || after > time.Second {
		t.Fatalf("refusal's retry-after: %v (carried: %v), want one in [20ms, 1s]: %v", after, ok, err)
	}
	close(b.release)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("a Connect in hand failed: %v", err)
		}
	}
	go func() { <-b.entered }()
	if _, err := c.Connect(ctx, admin.ValidConnect()); err != nil {
		t.Fatalf("Connect after the others were done: %v", err)
	}
}
