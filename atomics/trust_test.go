package atomics

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/seqd/seqd/admin/handshake"
	"github.com/seqd/seqd/dataplane"
	"github.com/seqd/seqd/verbs"
)

// nicLike is a soft device whose PDs offer no verbs.AtomicPolicer: a
// provider that, like a NIC, executes any atomic a connected peer posts.
type nicLike struct{ verbs.Device }

type plainPD struct{ verbs.PD }

func (d nicLike) AllocPD() (verbs.PD, error) {
	p, err := d.Device.AllocPD()
	if err != nil {
		return nil, err
	}
	return plainPD{p}, nil
}

func TestAssess(t *testing.T) {
	const block, margin = 64, 16
	for _, c := range []struct {
		name           string
		next, seen, hi uint64
		want           reading
	}{
		{"fresh lease", 1000, 1000, 1063, readFine},
		{"moved up", 1010, 1000, 1063, readFine},
		{"half used", 1032, 1000, 1063, readRenew},
		{"within the margin", 1048, 1000, 1063, readLow},
		{"exhausted", 1064, 1000, 1063, readLow},
		{"one beyond the lease", 1065, 1000, 1063, readOverrun},
		{"far beyond", 1 << 40, 1000, 1063, readOverrun},
		{"one back", 999, 1000, 1063, readRewound},
		{"wrapped", 0, 1000, 1063, readRewound},
	} {
		if got := assess(c.next, c.seen, c.hi, block, margin); got != c.want {
			t.Errorf("%s: assess(next %d, seen %d, hi %d) = %d, want %d", c.name, c.next, c.seen, c.hi, got, c.want)
		}
	}
}

// TestAdmitWithoutPolicyNeedsTrust (issue 26): on a provider that cannot
// refuse other atomics, only clients with a trusted identity are
// admitted; where the provider enforces the policy, everyone is.
func TestAdmitWithoutPolicyNeedsTrust(t *testing.T) {
	nic, err := New(context.Background(), Config{Device: nicLike{open(t, "")}, Oracle: &fakeOracle{}, Epoch: 1,
		Trusted: []string{"spiffe://seq/client"}})
	if err != nil {
		t.Fatal(err)
	}
	defer nic.Close()
	for _, c := range []struct {
		ids []string
		ok  bool
	}{
		{nil, false},
		{[]string{"eve"}, false},
		{[]string{"eve", "spiffe://seq/client"}, true},
	} {
		_, err := admitPeer(t, nic, handshake.Admission{Name: "c", Identities: c.ids})
		if c.ok && err != nil {
			t.Errorf("identities %q: Admit = %v, want admitted", c.ids, err)
		}
		if !c.ok && (!errors.Is(err, ErrUntrusted) || !errors.Is(err, dataplane.ErrFailedPrecondition)) {
			t.Errorf("identities %q: Admit = %v, want %v", c.ids, err, ErrUntrusted)
		}
	}
	if st := nic.Lease(); st.Untrusted != 2 || st.Policed {
		t.Errorf("stats %+v, want 2 untrusted and no policy", st)
	}
	soft, err := New(context.Background(), Config{Device: open(t, ""), Oracle: &fakeOracle{}, Epoch: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer soft.Close()
	if _, err := admitPeer(t, soft, handshake.Admission{Name: "anyone"}); err != nil {
		t.Errorf("with the policy enforced, Admit = %v", err)
	}
	if !soft.Lease().Policed {
		t.Errorf("the soft provider's policy is not in use")
	}
}

// TestTrustedClientBreachOnNIC (issue 26): a trusted client on a
// provider that cannot refuse its atomic moves the counter backward or
// far ahead; the monitor fences, and a client admitted after that gets
// values above every value served, within a lease below the persisted
// mark.
func TestTrustedClientBreachOnNIC(t *testing.T) {
	for _, h := range hostiles[:3] {
		t.Run(h.name, func(t *testing.T) {
			o := openOracle(t, t.TempDir())
			srv, err := New(context.Background(), Config{Device: nicLike{open(t, "")}, Oracle: o, Epoch: 1,
				Interval: 200 * time.Microsecond, Trusted: []string{"svc"}})
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			trusted := handshake.Admission{Name: "A", Identities: []string{"svc"}}
			a, err := admitPeer(t, srv, trusted)
			if err != nil {
				t.Fatal(err)
			}
			served := a.take(2000)
			m, err := admitPeer(t, srv, trusted)
			if err != nil {
				t.Fatal(err)
			}
			v, err := h.run(m, srv)
			if err != nil {
				t.Fatalf("without the policy the provider refused %s: %v", h.name, err)
			}
			served = append(served, v, srv.Next()-1)
			waitFor(t, "fenced", func() bool { return srv.Lease().Overruns+srv.Lease().Rewinds > 0 })
			waitFor(t, "admitting again", func() bool { return !srv.Lease().Fenced })
			b, err := admitPeer(t, srv, trusted)
			if err != nil {
				t.Fatal(err)
			}
			later := b.take(100)
			checkAbove(t, served, later, "B (started after the breach)")
			if top, mark := slices.Max(later), o.Mark(); top > mark {
				t.Errorf("B got %d, above the persisted mark %d", top, mark)
			}
		})
	}
}
