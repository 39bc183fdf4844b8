package ha

import (
	"errors"
	"testing"
	"time"

	"github.com/seqd/seqd/spec"
)

func TestServeLeaseConfig(t *testing.T) {
	base := func() Config { return Config{Endpoints: []string{"x"}, Advertise: "a", Logger: quietLogger()} }
	for _, tc := range []struct {
		name        string
		beat, lease time.Duration
		ttl         time.Duration
		wantErr     bool
		wantBeat    time.Duration
		wantLease   time.Duration
	}{
		{name: "defaults", wantBeat: DefaultBeat, wantLease: DefaultServeLease},
		{name: "off", beat: -1},
		{name: "off ignores lease", beat: -1, lease: time.Second},
		{name: "custom", beat: 50 * time.Millisecond, lease: 200 * time.Millisecond, wantBeat: 50 * time.Millisecond, wantLease: 200 * time.Millisecond},
		{name: "lease below two beats", beat: 100 * time.Millisecond, lease: 150 * time.Millisecond, wantErr: true},
		{name: "lease above TTL/2", beat: 100 * time.Millisecond, lease: 2 * time.Second, ttl: 3 * time.Second, wantErr: true},
		{name: "beat too short", beat: time.Millisecond, lease: 100 * time.Millisecond, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := base()
			c.Beat, c.ServeLease, c.TTL = tc.beat, tc.lease, tc.ttl
			err := c.validate()
			if tc.wantErr {
				if !errors.Is(err, ErrConfig) {
					t.Fatalf("validate = %v, want ErrConfig", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.Beat != tc.wantBeat || c.ServeLease != tc.wantLease || c.FastFailover() != (tc.wantBeat > 0) {
				t.Fatalf("Beat %v ServeLease %v FastFailover %v, want %v %v", c.Beat, c.ServeLease, c.FastFailover(), tc.wantBeat, tc.wantLease)
			}
			if !c.FastFailover() && c.TakeoverAfter() != 0 {
				t.Fatalf("TakeoverAfter %v with the serving lease off", c.TakeoverAfter())
			}
		})
	}
}

// TestTakeoverOutlastsServeLease checks the inequality doc.go's argument
// rests on: a wait of TakeoverAfter on a clock running MaxDrift fast
// lasts longer in real time than ServeLease plus the residence bound on
// a clock running MaxDrift slow, without counting TakeoverSlack (a
// cushion, not a term of the argument).
func TestTakeoverOutlastsServeLease(t *testing.T) {
	for _, lease := range []time.Duration{20 * time.Millisecond, DefaultServeLease, 1500 * time.Millisecond} {
		c := Config{Beat: lease / 2, ServeLease: lease}
		standbyReal := float64(c.TakeoverAfter()-TakeoverSlack) / (1 + MaxDrift)
		leaderReal := float64(lease+spec.MaxResidence) / (1 - MaxDrift)
		if standbyReal <= leaderReal {
			t.Errorf("ServeLease %v: takeover after %v (≥ %.0fns real) does not outlast the leader (≤ %.0fns real)",
				lease, c.TakeoverAfter(), standbyReal, leaderReal)
		}
	}
}

func TestBeatValue(t *testing.T) {
	k, r, ok := parseBeat([]byte(beatValue("/seqd/election/694d9a1b2c", 42)))
	if !ok || k != "/seqd/election/694d9a1b2c" || r != 42 {
		t.Fatalf("round trip: %q %d %v", k, r, ok)
	}
	for _, bad := range []string{"", "42", "42 ", " /k", "x /k", "0 /k", "-3 /k"} {
		if _, _, ok := parseBeat([]byte(bad)); ok {
			t.Errorf("parseBeat(%q) accepted", bad)
		}
	}
}

// TestDeposable: only a leader whose own term wrote the heartbeat can be
// deposed for its silence; one that never wrote one (the serving lease
// off, or not yet beating) is left to its etcd lease.
func TestDeposable(t *testing.T) {
	lead := beatView{leaderKey: "/p/election/a", leaderRev: 7, leaderVal: "x:1"}
	for _, tc := range []struct {
		name string
		beat []byte
		rev  int64
		want bool
	}{
		{"own heartbeat", []byte(beatValue("/p/election/a", 7)), 12, true},
		{"no heartbeat", nil, 0, false},
		{"an earlier term's heartbeat", []byte(beatValue("/p/election/z", 3)), 5, false},
		{"same key, earlier revision", []byte(beatValue("/p/election/a", 6)), 12, false},
		{"garbage", []byte("nonsense"), 12, false},
	} {
		v := lead
		v.setBeat(tc.beat, tc.rev)
		if got := v.deposable(); got != tc.want {
			t.Errorf("%s: deposable = %v, want %v", tc.name, got, tc.want)
		}
	}
	if (&beatView{beatRev: 3, beatKey: "k", beatTerm: 1}).deposable() {
		t.Error("no leader: deposable")
	}
}

// LeaderSilent: a standby that saw the leader's heartbeat move more than
// two Beats ago reports it silent; a heartbeat seen (or a view without
// one) ends that, and wakes LeaderChanged's waiters; the leader itself
// never reports silence.
func TestLeaderSilent(t *testing.T) {
	n := &Node{cfg: Config{Beat: 100 * time.Millisecond}, base: time.Now().Add(-time.Hour), leaderCh: make(chan struct{})}
	if n.LeaderSilent() {
		t.Fatal("silent with no heartbeat known")
	}
	n.noteBeat(true)
	if n.LeaderSilent() {
		t.Fatal("silent just after a heartbeat")
	}
	ch := n.LeaderChanged()
	n.beatAt.Store(int64(time.Since(n.base) - 250*time.Millisecond)) // the last one, 2.5 Beats ago
	if !n.LeaderSilent() {
		t.Fatal("not silent 2.5 Beats after the last heartbeat")
	}
	n.noteBeat(true)
	select {
	case <-ch:
	default:
		t.Fatal("a heartbeat after a silence did not wake LeaderChanged's waiters")
	}
	if n.LeaderSilent() {
		t.Fatal("silent after a heartbeat")
	}
	n.beatAt.Store(int64(time.Since(n.base) - 250*time.Millisecond))
	ch = n.LeaderChanged()
	n.noteBeat(false) // a leader without a heartbeat of its term
	select {
	case <-ch:
	default:
		t.Fatal("a view without a heartbeat after a silence did not wake LeaderChanged's waiters")
	}
	if n.LeaderSilent() {
		t.Fatal("silent with no heartbeat known")
	}
	n.beatAt.Store(int64(time.Since(n.base) - 250*time.Millisecond))
	n.term.Store(&Term{})
	if n.LeaderSilent() {
		t.Fatal("the leader reports its own heartbeat silent")
	}
}
