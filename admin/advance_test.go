package admin_test

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seqd/seqd/admin"
	"github.com/seqd/seqd/admin/adminclient"
	"github.com/seqd/seqd/admin/adminpb"
	"github.com/seqd/seqd/admin/admintest"
)

// advancer is a backend that records Advance and TransferLeader calls.
type advancer struct {
	*admintest.Backend
	to, maxStep uint64
	calls       int
}

func (a *advancer) Advance(_ context.Context, to, maxStep uint64) (*adminpb.AdvanceResponse, error) {
	a.calls++
	a.to, a.maxStep = to, maxStep
	return &adminpb.AdvanceResponse{Previous: 1, Current: to + 1}, nil
}

func TestAdvanceAndTransfer(t *testing.T) {
	ctx := testCtx(t)
	// A backend without the capabilities: Unimplemented and
	// FailedPrecondition; Status reports the role "single".
	_, _, cc := start(t, admin.Config{Logger: quietLogger()})
	c := adminpb.NewAdminClient(cc)
	if _, err := c.Advance(ctx, &adminpb.AdvanceRequest{Min: 5}); status.Code(err) != codes.Unimplemented {
		t.Errorf("Advance on a plain backend = %v, want Unimplemented", err)
	}
	if _, err := c.TransferLeader(ctx, &adminpb.TransferLeaderRequest{}); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("TransferLeader without HA = %v, want FailedPrecondition", err)
	}
	if st, err := c.Status(ctx, &adminpb.StatusRequest{}); err != nil || st.GetRole() != adminclient.RoleSingle {
		t.Errorf("Status = %v, %v; want role single", st, err)
	}

	a := &advancer{Backend: admintest.NewBackend(nil)}
	_, addr := admintest.Start(t, admin.Config{Logger: quietLogger(), MaxAdvance: 1000}, a)
	cc2, err := adminclient.Dial(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer cc2.Close()
	c = adminpb.NewAdminClient(cc2)
	// min 0 is what an unset field reads as: refused before the backend.
	if _, err := c.Advance(ctx, &adminpb.AdvanceRequest{}); status.Code(err) != codes.InvalidArgument || a.calls != 0 {
		t.Errorf("Advance(0) = %v (backend called %d times), want InvalidArgument before the backend", err, a.calls)
	}
	resp, err := c.Advance(ctx, &adminpb.AdvanceRequest{Min: 77})
	if err != nil || resp.GetCurrent() != 78 || a.to != 77 || a.maxStep != 1000 {
		t.Errorf("Advance(77) = %v, %v; backend saw to=%d maxStep=%d", resp, err, a.to, a.maxStep)
	}
}
