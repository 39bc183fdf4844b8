package admin_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seqd/seqd/admin"
	"github.com/seqd/seqd/admin/adminclient"
	"github.com/seqd/seqd/admin/adminpb"
	"github.com/seqd/seqd/admin/admintest"
	"github.com/seqd/seqd/spec"
)

// advancer is a backend that advances a counter the way the data plane
// does (never backward, at most maxStep) and records its calls.
type advancer struct {
	*admintest.Backend
	mu          sync.Mutex
	role        string // Status's role; a standby reports no current value
	cur         uint64
	to, maxStep uint64
	calls       int
}

func (a *advancer) Status(ctx context.Context) (*adminpb.StatusResponse, error) {
	st, err := a.Backend.Status(ctx)
	if err != nil {
		return nil, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	st.Role = a.role
	if a.role != adminclient.RoleStandby {
		st.Current = a.cur
	}
	return st, nil
}

func (a *advancer) Advance(_ context.Context, to, maxStep uint64) (*adminpb.AdvanceResponse, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.calls++
	a.to, a.maxStep = to, maxStep
	prev := a.cur
	switch {
	case to <= prev:
		return nil, admin.ErrFailedPrecondition
	case to-prev > maxStep:
		return nil, admin.ErrInvalidArgument
	}
	a.cur = to + 1
	return &adminpb.AdvanceResponse{Previous: prev, Current: a.cur}, nil
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

	a := &advancer{Backend: admintest.NewBackend(nil), cur: 10}
	c = advanceClient(t, admin.Config{Logger: quietLogger(), MaxAdvance: 1000, Format: spec.FormatCounter}, a)
	// min 0 is what an unset field reads as: refused before the backend.
	if _, err := c.Advance(ctx, &adminpb.AdvanceRequest{}); status.Code(err) != codes.InvalidArgument || a.calls != 0 {
		t.Errorf("Advance(0) = %v (backend called %d times), want InvalidArgument before the backend", err, a.calls)
	}
	// The backend is held to the step measured from its current value.
	resp, err := c.Advance(ctx, &adminpb.AdvanceRequest{Min: 77})
	if err != nil || resp.GetCurrent() != 78 || a.to != 77 || a.maxStep != 67 {
		t.Errorf("Advance(77) = %v, %v; backend saw to=%d maxStep=%d, want maxStep 67", resp, err, a.to, a.maxStep)
	}
	// Over MaxAdvance: refused before the backend, naming the bound.
	calls := a.calls
	if _, err := c.Advance(ctx, &adminpb.AdvanceRequest{Min: 78 + 1001}); status.Code(err) != codes.InvalidArgument ||
		a.calls != calls || !strings.Contains(err.Error(), "more than one Advance may move it (1000 values)") {
		t.Errorf("Advance over MaxAdvance = %v (backend called: %v), want InvalidArgument naming the bound", err, a.calls != calls)
	}
}

func advanceClient(t *testing.T, cfg admin.Config, b admin.Backend) adminpb.AdminClient {
	t.Helper()
	_, addr := admintest.Start(t, cfg, b)
	cc, err := adminclient.Dial(testCtx(t), addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return adminpb.NewAdminClient(cc)
}

// clock is a settable time for the Advance limits.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

func refused(t *testing.T, reg *prometheus.Registry, typ string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "seqd_admin_advance_refused_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "type" && l.GetValue() == typ {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no seqd_admin_advance_refused_total{type=%q}", typ)
	return 0
}

// TestAdvanceBudget is item 3 of issue 26: 3,122 Advance calls in 5s moved
// hybrid timestamps 3,121 days ahead, each within the per-call bound.
// All Advances of a window now share a budget, and one that would go
// over it is refused with ResourceExhausted, in human units, counted in
// seqd_admin_advance_refused_total{type="budget"}; the budget is whole
// again after the window, and a refused backend call costs nothing.
func TestAdvanceBudget(t *testing.T) {
	const ms = uint64(1) << spec.HybridLogicalBits
	hour := uint64(time.Hour/time.Millisecond) * ms
	for _, tc := range []struct {
		format         spec.Format
		budget, first  uint64 // the budget; the first, allowed step
		over           uint64 // a step over what is left
		want           string
		last, overLast uint64 // exactly what is left; then one more value
	}{
		{spec.FormatCounter, 1000, 600, 500, "advance of 500 values exceeds the remaining budget of 400 values", 400, 1},
		{spec.FormatHybrid, 4 * hour, 3 * hour, 3*hour + 12*60*1000*ms, "advance of 3h12m0s exceeds the remaining budget of 1h0m0s", hour, 1},
	} {
		t.Run(tc.format.String(), func(t *testing.T) {
			ctx := testCtx(t)
			clk := &clock{t: time.Unix(1e9, 0)}
			reg := prometheus.NewRegistry()
			m, err := admin.NewMetrics(reg, nil)
			if err != nil {
				t.Fatal(err)
			}
			a := &advancer{Backend: admintest.NewBackend(nil), cur: 1 << 50}
			c := advanceClient(t, admin.WithClock(admin.Config{Logger: quietLogger(), Metrics: m, Format: tc.format,
				MaxAdvance: 1 << 62, AdvanceBudget: tc.budget, AdvanceWindow: time.Hour, AdvanceRate: 1000}, clk.now), a)
			step := func(n uint64) error {
				_, err := c.Advance(ctx, &adminpb.AdvanceRequest{Min: a.cur + n})
				return err
			}
			if err := step(tc.first); err != nil {
				t.Fatalf("first advance: %v", err)
			}
			calls := a.calls
			err = step(tc.over)
			if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), tc.want) || a.calls != calls {
				t.Fatalf("advance over the budget = %v (backend called: %v); want ResourceExhausted %q before the backend", err, a.calls != calls, tc.want)
			}
			if got := refused(t, reg, "budget"); got != 1 {
				t.Errorf("refused{type=budget} = %v, want 1", got)
			}
			// A call the backend refuses (backward) spends nothing.
			if _, err := c.Advance(ctx, &adminpb.AdvanceRequest{Min: a.cur - 1}); status.Code(err) != codes.FailedPrecondition {
				t.Fatalf("backward advance = %v, want FailedPrecondition", err)
			}
			if err := step(tc.last); err != nil {
				t.Fatalf("advance by exactly what is left: %v", err)
			}
			if err := step(tc.overLast); status.Code(err) != codes.ResourceExhausted {
				t.Fatalf("advance with the budget spent = %v, want ResourceExhausted", err)
			}
			clk.add(time.Hour)
			if err := step(tc.budget); err != nil {
				t.Fatalf("advance by the whole budget in the next window: %v", err)
			}
			if got := refused(t, reg, "budget"); got != 2 {
				t.Errorf("refused{type=budget} = %v, want 2", got)
			}
		})
	}
}

// TestAdvanceStandby: a standby reports no current value, so the step
// cannot be measured before the call: the backend is held to what the
// budget has left, and what it did not use is given back.
func TestAdvanceStandby(t *testing.T) {
	ctx := testCtx(t)
	a := &advancer{Backend: admintest.NewBackend(nil), role: adminclient.RoleStandby, cur: 1 << 40}
	c := advanceClient(t, admin.Config{Logger: quietLogger(), Format: spec.FormatCounter, MaxAdvance: 1 << 62, AdvanceBudget: 1000}, a)
	if _, err := c.Advance(ctx, &adminpb.AdvanceRequest{Min: 1<<40 + 5000}); status.Code(err) != codes.InvalidArgument || a.maxStep != 1000 {
		t.Fatalf("Advance by 5000 on a standby = %v, backend bound %d; want the backend held to the budget, 1000", err, a.maxStep)
	}
	if _, err := c.Advance(ctx, &adminpb.AdvanceRequest{Min: a.cur + 600}); err != nil || a.maxStep != 1000 {
		t.Fatalf("Advance by 600 = %v, backend bound %d; want success within the whole budget (the refused call spent nothing)", err, a.maxStep)
	}
	if _, err := c.Advance(ctx, &adminpb.AdvanceRequest{Min: a.cur + 100}); err != nil || a.maxStep != 400 {
		t.Fatalf("next Advance = %v, backend bound %d; want 400 left", err, a.maxStep)
	}
}

// TestAdvanceRate: Advance calls beyond AdvanceRate a minute are refused
// with ResourceExhausted saying when the next is allowed, and counted in
// seqd_admin_advance_refused_total{type="rate"}; the bucket refills
// evenly.
func TestAdvanceRate(t *testing.T) {
	ctx := testCtx(t)
	clk := &clock{t: time.Unix(1e9, 0)}
	reg := prometheus.NewRegistry()
	m, err := admin.NewMetrics(reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	a := &advancer{Backend: admintest.NewBackend(nil), cur: 100}
	c := advanceClient(t, admin.WithClock(admin.Config{Logger: quietLogger(), Metrics: m, Format: spec.FormatCounter,
		AdvanceRate: 3}, clk.now), a)
	for i := range 3 {
		if _, err := c.Advance(ctx, &adminpb.AdvanceRequest{Min: a.cur + 1}); err != nil {
			t.Fatalf("advance %d of 3: %v", i+1, err)
		}
	}
	calls := a.calls
	_, err = c.Advance(ctx, &adminpb.AdvanceRequest{Min: a.cur + 1})
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "rate limit of 3 calls a minute; the next call is allowed in 20s") || a.calls != calls {
		t.Fatalf("4th advance in a minute = %v; want ResourceExhausted naming the rate and the wait, before the backend", err)
	}
	if got := refused(t, reg, "rate"); got != 1 {
		t.Errorf("refused{type=rate} = %v, want 1", got)
	}
	if got := testutil.CollectAndCount(reg, "seqd_admin_advance_refused_total"); got != 2 {
		t.Errorf("advance_refused_total has %d series, want 2 (rate, budget)", got)
	}
	clk.add(20 * time.Second)
	if _, err := c.Advance(ctx, &adminpb.AdvanceRequest{Min: a.cur + 1}); err != nil {
		t.Fatalf("advance after the bucket refilled one call: %v", err)
	}
}
