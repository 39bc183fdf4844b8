package client

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/seqd/seqd/admin"
	"github.com/seqd/seqd/admin/adminclient"
	"github.com/seqd/seqd/admin/adminpb"
	"github.com/seqd/seqd/admin/admintest"
)

// busyBackend is a leader whose Connect is refused as busy, with a
// retry-after, the first refuse times (admission control in a storm).
type busyBackend struct {
	*roleBackend
	refuse atomic.Int32
}

func (b *busyBackend) Connect(ctx context.Context, req *adminpb.ConnectRequest) (*adminpb.ConnectResponse, error) {
	if b.refuse.Add(-1) >= 0 {
		st, _ := status.New(codes.Unavailable, "busy").WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(5 * time.Millisecond)})
		return nil, st.Err()
	}
	return b.roleBackend.Connect(ctx, req)
}

// TestBusyRetrySkipsStatus: a Connect refused as busy is retried at the
// same instance without another Status: the instance just said it
// serves, and in a failover storm every such Status was one more call
// to the leader that had refused for want of capacity.
func TestBusyRetrySkipsStatus(t *testing.T) {
	b := &busyBackend{roleBackend: &roleBackend{silentBackend: &silentBackend{Backend: admintest.NewBackend(nil)}}}
	_, addr := admintest.Start(t, admin.Config{Logger: slog.New(slog.DiscardHandler)}, b)
	b.set(adminclient.RoleLeader, addr)
	const refusals = 3
	b.refuse.Store(refusals)
	dialT(t, addr, WithQPs(1))
	if n := len(b.Connects()); n != 1 {
		t.Fatalf("%d Connects admitted, want 1", n)
	}
	if n := b.statuses.Load(); n != 1 {
		t.Errorf("%d Status calls for one Connect refused %d times as busy, want 1", n, refusals)
	}
}
