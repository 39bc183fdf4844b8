package modes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seqd/seqd/admin"
	"github.com/seqd/seqd/admin/adminpb"
	"github.com/seqd/seqd/atomics"
	"github.com/seqd/seqd/darpc"
	"github.com/seqd/seqd/dataplane"
	"github.com/seqd/seqd/erpc"
	"github.com/seqd/seqd/fasst"
	"github.com/seqd/seqd/headeronly"
	"github.com/seqd/seqd/herd"
	"github.com/seqd/seqd/modes/adminmode"
	"github.com/seqd/seqd/oracle"
	"github.com/seqd/seqd/rfp"
	"github.com/seqd/seqd/spec"
	"github.com/seqd/seqd/verbs"
)

// registry is every mode seqd runs: one line per mode, keyed by its
// spec name (spec/modes.go).
var registry = map[string]dataplane.Factory{
	spec.ModeSpecS0:  headeronly.Start,
	spec.ModeHERD:    herd.Start,
	spec.ModeAtomics: atomics.Start,
	spec.ModeFaSST:   fasst.Start,
	spec.ModeDaRPC:   darpc.Start,
	spec.ModeRFP:     rfp.Start,
	spec.ModeERPC:    erpc.Start,
}

// All lists every registered mode, in the order of spec.Modes.
var All = registered()

func registered() []string {
	var all []string
	for _, m := range spec.Modes {
		if registry[m] != nil {
			all = append(all, m)
		}
	}
	return all
}

// ErrUnknownMode reports a mode name outside All.
var ErrUnknownMode = errors.New("modes: unknown mode")

var errNoMode = fmt.Errorf("%w: no mode is running (a switch failed)", admin.ErrUnavailable)

// Config configures a Switch.
type Config struct {
	Device verbs.Device
	Oracle *oracle.Oracle
	// Workers, RespQPs, Cores, MaxWindow, MaxClients as the modes take them
	// (zero: each mode's default).
	Workers, RespQPs      int
	Cores                 []int
	MaxWindow, MaxClients int
	Version               string
	Logger                *slog.Logger
	// AtomicsBlock is the atomics lease size (default: the mode's).
	AtomicsBlock int
	// AtomicsTrusted are the client identities atomics admits on a
	// provider that cannot refuse their other atomics (a NIC).
	AtomicsTrusted []string
	// MaxSessionRecv caps one session's QPs × window (dataplane.Config).
	MaxSessionRecv int
	// SharedRecv is spec-s0's request queue layout (dataplane.Config).
	SharedRecv bool
	// QKey is the Q_Key of every data-path packet, handed out at Connect.
	// Pick it at random per server start (RandomQKey) so that only
	// clients admitted through Connect can address the data path; zero
	// means verbs.DefaultQKey.
	QKey uint32
}

// RandomQKey returns a random Q_Key (verbs.RandomQKey): non-zero, not
// the default, and with the high bit clear (a set high bit means a
// controlled Q_Key).
func RandomQKey() uint32 { return verbs.RandomQKey() }

// Switch is the admin backend that runs one mode at a time.
type Switch struct {
	cfg Config
	log *slog.Logger

	mu       sync.RWMutex
	mode     string
	dp       *adminmode.Backend // the running mode; nil after a failed switch
	switches uint64
}

var (
	_ admin.Backend    = (*Switch)(nil)
	_ admin.ModeSetter = (*Switch)(nil)
)

// New starts mode.
func New(ctx context.Context, cfg Config, mode string) (*Switch, error) {
	if cfg.Device == nil || cfg.Oracle == nil {
		return nil, fmt.Errorf("modes: Device and Oracle are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &Switch{cfg: cfg, log: cfg.Logger}
	dp, err := s.start(ctx, mode)
	if err != nil {
		return nil, err
	}
	s.mode, s.dp = mode, dp
	return s, nil
}

func (s *Switch) start(ctx context.Context, mode string) (*adminmode.Backend, error) {
	start := registry[mode]
	if start == nil {
		return nil, fmt.Errorf("%w %q (have %q)", ErrUnknownMode, mode, All)
	}
	c := &s.cfg
	epoch := uint64(time.Now().UnixNano())
	f := s.cfg.Oracle.Format()
	m, err := start(ctx, dataplane.Config{Device: c.Device, Oracle: c.Oracle, Behind: oracle.ErrBehind, Format: f,
		Workers: c.Workers, RespQPs: c.RespQPs, Cores: c.Cores, MaxWindow: c.MaxWindow, MaxClients: c.MaxClients,
		Logger: c.Logger, Epoch: epoch, QKey: c.QKey, AtomicsBlock: c.AtomicsBlock,
		AtomicsTrusted: c.AtomicsTrusted, MaxSessionRecv: c.MaxSessionRecv,
		SharedRecv: c.SharedRecv})
	if err != nil {
		return nil, err
	}
	facts, _ := spec.Facts(mode) // seqd_<Metrics>_*: Spec-S0's are seqd_headeronly_*
	metrics := facts.Metrics
	return &adminmode.Backend{Mode: m, Name: mode, Metrics: metrics, Format: f, Epoch: epoch, Version: c.Version,
		Device: c.Device, Oracle: c.Oracle}, nil
}

// Mode is the mode being served.
func (s *Switch) Mode() string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.mode
}

// Connect admits a client to the current mode.
func (s *Switch) Connect(ctx context.Context, req *adminpb.ConnectRequest) (*adminpb.ConnectResponse, error) {
	return s.admit(ctx, nil, req)
}

// Replace releases the session old names and admits req in the current
// mode (admin.Replacer), in one step (dataplane.Mode.Admit).
func (s *Switch) Replace(ctx context.Context, old *adminpb.DisconnectRequest, req *adminpb.ConnectRequest) (*adminpb.ConnectResponse, error) {
	return s.admit(ctx, old, req)
}

// admit admits req to the current mode, replacing the session old names
// (nil: none).
func (s *Switch) admit(ctx context.Context, old *adminpb.DisconnectRequest, req *adminpb.ConnectRequest) (*adminpb.ConnectResponse, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if m := req.GetMode(); m != "" && m != s.mode {
		return nil, fmt.Errorf("%w: the server runs %s, not %s", admin.ErrFailedPrecondition, s.mode, m)
	}
	if s.dp == nil {
		return nil, errNoMode
	}
	return s.dp.Replace(ctx, old, req)
}

// Disconnect releases a session of the current mode.
func (s *Switch) Disconnect(ctx context.Context, req *adminpb.DisconnectRequest) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.dp == nil {
		return errNoMode
	}
	return s.dp.Disconnect(ctx, req)
}

// Status reports the current mode.
func (s *Switch) Status(ctx context.Context) (*adminpb.StatusResponse, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.dp == nil {
		return nil, errNoMode
	}
	st, err := s.dp.Status(ctx)
	if err != nil {
		return nil, err
	}
	st.PersistedMark = s.cfg.Oracle.Mark()
	return st, nil
}

// SetMode switches to req.Mode (a no-op when it is already served).
func (s *Switch) SetMode(ctx context.Context, req *adminpb.SetModeRequest) (*adminpb.SetModeResponse, error) {
	mode := req.GetMode()
	s.mu.Lock()
	defer s.mu.Unlock()
	prev := s.mode
	if s.dp == nil {
		prev = ""
	}
	if mode == prev {
		return &adminpb.SetModeResponse{Previous: prev, Mode: mode, High: s.cfg.Oracle.Current(), Epoch: s.dp.Epoch}, nil
	}
	if registry[mode] == nil {
		return nil, fmt.Errorf("%w: %w %q", admin.ErrInvalidArgument, ErrUnknownMode, mode)
	}
	var high uint64
	if s.dp != nil {
		h, err := s.dp.Mode.Stop()
		if err != nil {
			return nil, fmt.Errorf("modes: stopping %s: %w", prev, err)
		}
		s.dp.Mode.Close()
		s.dp, high = nil, h
	}
	high = max(high, s.cfg.Oracle.Current())
	if err := s.cfg.Oracle.Floor(high); err != nil {
		return nil, fmt.Errorf("%w: modes: floor the oracle at %d: %v", admin.ErrUnavailable, high, err)
	}
	dp, err := s.start(ctx, mode)
	if err != nil {
		s.log.Error("starting the new mode failed; restarting the old one", "mode", mode, "err", err)
		s.dp = nil
		if dp, err2 := s.start(ctx, prev); err2 == nil {
			s.dp = dp
		} else {
			s.log.Error("restarting the old mode failed", "mode", prev, "err", err2)
		}
		return nil, fmt.Errorf("%w: modes: start %s: %v", admin.ErrUnavailable, mode, err)
	}
	s.mode, s.dp = mode, dp
	s.switches++
	s.log.Info("mode switched", "from", prev, "to", mode, "high", high)
	return &adminpb.SetModeResponse{Previous: prev, Mode: mode, High: high, Epoch: dp.Epoch}, nil
}

// Advance moves the oracle forward for an operator (Admin.Advance): every
// value handed out afterwards is above to. It refuses a target at or below
// the current value and a step beyond maxStep, and in atomics mode, whose
// counter lives in the NIC. It returns once a mark above to is persisted
// (persist BEFORE reply): it claims one value above to, which only
// succeeds then, and reports it as current.
func (s *Switch) Advance(ctx context.Context, to, maxStep uint64) (*adminpb.AdvanceResponse, error) {
	o := s.cfg.Oracle
	s.mu.Lock() // no mode switch between the checks and the advance
	if s.mode == spec.ModeAtomics {
		s.mu.Unlock()
		others := slices.DeleteFunc(slices.Clone(All), func(m string) bool { return m == spec.ModeAtomics })
		return nil, fmt.Errorf("%w: advance: the atomics counter lives in the NIC; switch to %s first", admin.ErrFailedPrecondition, spec.ModeList(others))
	}
	prev := o.Current()
	var err error
	switch {
	case to <= prev:
		err = fmt.Errorf("%w: advance: %d is not above the current value %d; the counter never moves backward", admin.ErrFailedPrecondition, to, prev)
	case to-prev > maxStep:
		err = fmt.Errorf("%w: advance: %d is %d above the current value %d, more than the bound %d", admin.ErrInvalidArgument, to, to-prev, prev, maxStep)
	default:
		if err = o.Advance(to); errors.Is(err, oracle.ErrBackward) {
			err = fmt.Errorf("%w: %v", admin.ErrFailedPrecondition, err)
		} else if err != nil {
			err = fmt.Errorf("%w: %v", admin.ErrUnavailable, err)
		}
	}
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	// Wait without holding the lock: a term or mode may end meanwhile.
	v, err := o.ClaimWait(ctx, 1)
	if err != nil {
		return nil, fmt.Errorf("%w: advance: waiting for a mark above %d to be persisted: %v", admin.ErrUnavailable, to, err)
	}
	return &adminpb.AdvanceResponse{Previous: prev, Current: v}, nil
}

// Close stops the current mode and releases it.
func (s *Switch) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dp == nil {
		return nil
	}
	s.dp.Mode.Stop()
	err := s.dp.Mode.Close()
	s.dp = nil
	return err
}

// Collector exports the current mode's metrics at scrape time. It is
// unchecked (describes nothing) because the set changes with the mode.
func (s *Switch) Collector() prometheus.Collector { return (*dynCollector)(s) }

type dynCollector Switch

func (d *dynCollector) Describe(chan<- *prometheus.Desc) {}

func (d *dynCollector) Collect(ch chan<- prometheus.Metric) {
	s := (*Switch)(d)
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.dp == nil {
		return
	}
	s.dp.Collect(ch)
}
