package dataplanetest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"sync"
	"testing"

	"github.com/seqd/seqd/admin/handshake"
	"github.com/seqd/seqd/dataplane"
	"github.com/seqd/seqd/spec"
	"github.com/seqd/seqd/verbs"
	_ "github.com/seqd/seqd/verbs/soft" // the provider the suite runs modes on
)

// Harness is one mode as the suite runs it.
type Harness struct {
	// Name is the mode's name in spec.ModeTable: the suite reads the
	// mode's facts (ranges, wire generator, metrics prefix) there.
	Name string
	// Start is the mode's factory (the one package modes registers).
	Start dataplane.Factory
	// Shape is the admission of a client whose n QPs are at addr, with
	// QPNs from qpn up (several QPNs per QP when the mode takes two sets).
	// Nil: n QPs in Admission.QPs (Endpoints).
	Shape func(addr verbs.Address, qpn verbs.QPN, n int) handshake.Admission
	// State, when set, reports what the mode keeps per client besides
	// its sessions (peer-table entries, receive budget, ...), by name:
	// after churn each must be back at its value before it.
	State func(m dataplane.Mode) map[string]int
	// Identities are put in every admission (a mode that admits only
	// trusted identities on some providers).
	Identities []string
}

// Endpoints are n endpoints at addr, with QPNs from qpn up.
func Endpoints(addr verbs.Address, qpn verbs.QPN, n int) []handshake.Endpoint {
	eps := make([]handshake.Endpoint, n)
	for i := range eps {
		eps[i] = handshake.Endpoint{Addr: addr, QPN: qpn + verbs.QPN(i)}
	}
	return eps
}

// Part is one part of the suite.
type Part struct {
	Name string
	Run  func(t testing.TB, h *Harness)
}

// Parts are the suite's parts, in the order Run runs them.
func Parts() []Part {
	return []Part{
		{"Lifecycle/AdmitRelease", testAdmitRelease},
		{"Lifecycle/ReleaseOtherEpoch", testReleaseOtherEpoch},
		{"Lifecycle/Replace", testReplace},
		{"Lifecycle/ReplaceOtherEpoch", testReplaceOtherEpoch},
		{"Lifecycle/ReplaceRefusedKeepsOld", testReplaceRefused},
		{"Churn", testChurn},
		{"StopClose/Twice", testStopTwice},
		{"StopClose/CloseBeforeStop", testCloseBeforeStop},
		{"StopClose/Concurrent", testStopConcurrent},
		{"StopClose/NoAdmitAfterStop", testNoAdmitAfterStop},
		{"Errors/Kinds", testErrorKinds},
		{"Errors/Capacity", testCapacity},
		{"Errors/Counters", testCounters},
		{"Hostile/Admissions", testHostile},
		{"Hostile/Packets", testHostilePackets},
		{"Serve", testServe},
		{"SourcePorts", testSourcePorts},
		{"Switch", testSwitch},
		{"Wire", testWire},
	}
}

// Run runs every part of the suite against the mode h describes.
func Run(t *testing.T, h Harness) {
	if _, ok := spec.Facts(h.Name); !ok {
		t.Fatalf("dataplanetest: mode %q is not in spec.ModeTable", h.Name)
	}
	if h.Start == nil {
		t.Fatalf("dataplanetest: mode %s: no factory", h.Name)
	}
	for _, p := range Parts() {
		t.Run(p.Name, func(t *testing.T) { p.Run(t, &h) })
	}
}

// The configuration the suite starts modes with: small enough that the
// bounds are reached quickly.
const (
	workers    = 2
	maxWindow  = 32
	maxClients = 8
)

func (h *Harness) facts() spec.ModeFacts {
	f, _ := spec.Facts(h.Name)
	return f
}

// instance is one started mode.
type instance struct {
	dataplane.Mode
	cfg    dataplane.Config
	oracle *Oracle
}

// epochs hands out a fresh epoch per start, as package modes does.
var epochs struct {
	sync.Mutex
	next uint64
}

func nextEpoch() uint64 {
	epochs.Lock()
	defer epochs.Unlock()
	epochs.next++
	return 1000 + epochs.next
}

// open opens a soft device at addr ("127.0.0.1:0") with provider
// options opts, closed when the test ends; the test is skipped when the
// provider cannot run here.
func open(t testing.TB, addr, opts string) verbs.Device {
	t.Helper()
	o, err := verbs.ParseOptions(opts)
	if err != nil {
		t.Fatal(err)
	}
	d, err := verbs.Open("soft", addr, o)
	if err != nil {
		t.Skipf("dataplanetest: soft provider at %s (%s): %v", addr, opts, err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// start starts the mode on dev (nil: a fresh soft device) with the
// suite's bounds and oracle o (nil: a fresh one); it is stopped and
// closed when the test ends.
func (h *Harness) start(t testing.TB, dev verbs.Device, o *Oracle) *instance {
	t.Helper()
	if dev == nil {
		dev = open(t, "127.0.0.1:0", "")
	}
	if o == nil {
		o = &Oracle{}
	}
	cfg := dataplane.Config{Device: dev, Oracle: o, Behind: ErrBehind, Format: spec.FormatHybrid, Workers: workers,
		MaxWindow: maxWindow, MaxClients: maxClients, Logger: quiet, Epoch: nextEpoch(), QKey: verbs.RandomQKey(),
		AtomicsTrusted: h.Identities}
	m, err := h.Start(context.Background(), cfg)
	if err != nil {
		t.Fatalf("%s: start: %v", h.Name, err)
	}
	t.Cleanup(func() {
		m.Stop()
		m.Close()
	})
	return &instance{Mode: m, cfg: cfg, oracle: o}
}

// addr is client i's address: a distinct IPv4 address on loopback per
// i, on the RoCEv2 port.
func addr(i int) verbs.Address {
	ip := netip.AddrFrom4([4]byte{127, 1 + byte(i>>16), byte(i >> 8), byte(i)})
	return verbs.Address{GID: verbs.GIDFromAddr(ip), Port: 4791}
}

// admission is client i's admission of n QPs.
func (h *Harness) admission(i, n int) handshake.Admission {
	var a handshake.Admission
	if h.Shape != nil {
		a = h.Shape(addr(i), 0x100, n)
	} else {
		a = handshake.Admission{QPs: Endpoints(addr(i), 0x100, n)}
	}
	a.Name = fmt.Sprintf("conformance-%d", i)
	if a.Window == 0 {
		a.Window = 4
	}
	a.Identities = h.Identities
	return a
}

// admit admits a, failing t on an error.
func (in *instance) admit(t testing.TB, a handshake.Admission, replaces handshake.SessionRef) handshake.Grant {
	t.Helper()
	g, err := in.Admit(context.Background(), a, replaces)
	if err != nil {
		t.Fatalf("Admit(%s, replaces %+v) = %v", a.Name, replaces, err)
	}
	return g
}

func ref(g handshake.Grant) handshake.SessionRef {
	return handshake.SessionRef{ID: g.Session, Epoch: g.Epoch}
}

func (in *instance) wantSessions(t testing.TB, want int, when string) {
	t.Helper()
	if n := in.Stats().Sessions; n != want {
		t.Fatalf("%s: Stats().Sessions = %d, want %d", when, n, want)
	}
}

// kinds are dataplane's error kinds.
var kinds = []error{dataplane.ErrUnavailable, dataplane.ErrNoCapacity, dataplane.ErrInvalidArgument,
	dataplane.ErrFailedPrecondition, dataplane.ErrUnknownSession}

// kindOf is the one kind err wraps; an error naming no kind, or more
// than one, is nil.
func kindOf(err error) error {
	var k error
	for _, x := range kinds {
		if errors.Is(err, x) {
			if k != nil {
				return nil
			}
			k = x
		}
	}
	return k
}

// wantKind fails t unless err wraps want and no other kind.
func wantKind(t testing.TB, what string, err, want error) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: no error, want one of kind %q", what, want)
		return
	}
	if k := kindOf(err); k != want {
		t.Errorf("%s = %v: kind %v, want %q", what, err, k, want)
	}
}
