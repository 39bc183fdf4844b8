package loadgen

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/seqd/seqd/admin/adminclient"
	"github.com/seqd/seqd/admin/adminpb"
	"github.com/seqd/seqd/client"
	"github.com/seqd/seqd/loadgen/verify"
	"github.com/seqd/seqd/spec"
	"github.com/seqd/seqd/verbs"
	_ "github.com/seqd/seqd/verbs/soft" // the default provider
)

// Result is one point of one mode. The JSON fields are the interface
// scripts read; the others are for the table and the plot.
type Result struct {
	Mode          string  `json:"mode"`
	ThroughputOps float64 `json:"throughput_ops"`
	P50us         float64 `json:"p50_us"`
	P99us         float64 `json:"p99_us"`
	P999us        float64 `json:"p999_us"`
	Maxus         float64 `json:"max_us"`
	AvgBatch      float64 `json:"avg_batch"`
	SpecMisses    uint64  `json:"spec_misses"`
	Retransmits   uint64  `json:"retransmits"`
	Drops         uint64  `json:"drops"`
	Clients       int     `json:"clients"`
	Window        int     `json:"window"`
	MinTS         uint64  `json:"min_ts"`
	MaxTS         uint64  `json:"max_ts"`
	// Coalesce is the clients' client.WithCoalescing in a mode that
	// serves ranges: ranged requests in flight at most, 0 off; nil in
	// the other modes, which never coalesce.
	Coalesce *int `json:"coalesce,omitempty"`
	// ServerCPU is the CPU time (user + system, seconds) seqd used in
	// the measured interval, and OpsPerServerCore the answers per second
	// of it: timestamps per second per server core. 0 when not measured
	// (a seqd neither spawned nor named by -server-pid, or not Linux).
	ServerCPU        float64 `json:"server_cpu_s,omitempty"`
	OpsPerServerCore float64 `json:"ops_per_server_core,omitempty"`
	// ServerPackets: the packets seqd's provider received in the
	// measured interval (its rx_packets; 0 when it counts none): the
	// requests, so Answers / ServerPackets is the values per request.
	ServerPackets uint64 `json:"-"`

	P90us      float64        `json:"-"`
	Answers    uint64         `json:"-"` // answers inside the measured interval
	Errors     uint64         `json:"-"` // failed requests (timeouts)
	Timeouts   uint64         `json:"-"`
	Verified   int            `json:"-"` // calls checked
	Unverified uint64         `json:"-"` // calls beyond Config.VerifyMax
	Check      *verify.Report `json:"-"`
}

// Skipped is a requested mode that could not be run.
type Skipped struct {
	Mode string
	Err  error
}

// Report is a whole run.
type Report struct {
	Results      []Result `json:"results"`
	EchoFloorOps float64  `json:"echo_floor_ops"`
	Violations   int      `json:"violations"`

	// Wire engine: every server at every flow count, and Redis INCR.
	Wire  []WireResult `json:"wire,omitempty"`
	Redis *RedisResult `json:"redis,omitempty"`

	// Params are the run's parameters, for the plot's heading.
	Params Params `json:"params"`

	Echo     Echo      `json:"-"`
	Skipped  []Skipped `json:"-"`
	Examples []string  `json:"-"` // violation examples, a few per kind
	Server   string    `json:"-"`
}

// Run measures the echo floor, then every mode at every point, in order.
// A mode that cannot be switched to is skipped and listed in
// Report.Skipped; other failures end the run with an error.
func Run(ctx context.Context, c Config) (*Report, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	log := c.Logger
	rep := &Report{Params: c.params()}
	if c.Engine == EngineWire {
		return rep, runWire(ctx, &c, rep)
	}
	if c.Echo > 0 {
		// Before pinning: the floor is what a client and a server on
		// their own cores get from the transport, as in make bench-verbs,
		// not two busy-polling threads squeezed onto loadgen's cores.
		// On this host: loopback unless a device was given.
		dev := c.Device
		if dev == "" && c.Provider == "soft" {
			dev = "127.0.0.1:0"
		}
		e, err := MeasureEcho(c.Provider, dev, c.Echo)
		if err != nil {
			return nil, err
		}
		rep.Echo, rep.EchoFloorOps = e, e.RawUDP
		log.Info("echo floor", "provider_ops", int64(e.Provider), "raw_udp_ops", int64(e.RawUDP))
	}
	if err := pinProcess(c.Cores); err != nil {
		return nil, err
	}
	r := &runner{c: &c, log: log, rep: rep}
	defer r.closeServer()
	for _, mode := range c.Modes {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		if err := r.clientMode(ctx, mode); err != nil {
			return rep, err
		}
	}
	if err := r.closeServer(); err != nil {
		return rep, err
	}
	return rep, nil
}

type runner struct {
	c   *Config
	log *slog.Logger
	rep *Report
	srv *spawned // when spawned
	// readyAt: a freshly started seqd confirms no guess for
	// spec.Holdoff, answering every request in full; points wait for it.
	readyAt time.Time
	addr    string   // the leader's admin address
	members []string // every admin address given: the clients fail over among them
	adm     adminpb.AdminClient
	cc      interface{ Close() error }
	pool    chunkPool
}

// clientMode switches the server to mode and runs every point through
// the client library, adding the results to the report. A mode that
// cannot be switched to is skipped and listed.
func (r *runner) clientMode(ctx context.Context, mode string) error {
	skip := func(err error) {
		r.log.Warn("mode skipped", "mode", mode, "err", err)
		r.rep.Skipped = append(r.rep.Skipped, Skipped{mode, err})
	}
	if err := r.useMode(ctx, mode); err != nil {
		if errors.Is(err, ErrModeSwitch) {
			skip(err)
			return nil
		}
		return err
	}
	cos := r.c.Coalesce
	if f, _ := spec.Facts(mode); !f.Ranges || len(cos) == 0 {
		cos = []int{client.DefaultCoalescing}
	}
	for _, p := range r.c.Points() {
		for _, co := range cos {
			res, err := r.runPoint(ctx, mode, p, co)
			if errors.Is(err, ErrModeSwitch) {
				skip(err)
				return nil
			}
			if err != nil {
				return err
			}
			r.rep.Results = append(r.rep.Results, res)
			if res.Check != nil {
				r.rep.Violations += res.Check.Violations()
				for _, v := range res.Check.Examples {
					r.rep.Examples = append(r.rep.Examples, fmt.Sprintf("%s clients=%d window=%d coalesce=%d: %v", mode, p.Clients, p.Window, co, v))
				}
			}
		}
	}
	return nil
}

func (r *runner) closeServer() error {
	if r.cc != nil {
		r.cc.Close()
		r.cc, r.adm = nil, nil
	}
	if r.srv != nil {
		err := r.srv.stop()
		r.srv = nil
		return err
	}
	return nil
}

func (r *runner) connectAdmin(ctx context.Context, addr string) error {
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	g, err := adminclient.NewGroup(addr, r.c.adminOpts()...)
	if err != nil {
		return fmt.Errorf("loadgen: admin %s: %w", addr, err)
	}
	leader, cc, err := g.DialLeader(dctx) // an HA group's list: its leader
	if err != nil {
		return fmt.Errorf("loadgen: admin %s: %w", addr, err)
	}
	r.addr, r.members, r.cc, r.adm = leader, g.Addrs, cc, adminpb.NewAdminClient(cc)
	return nil
}

// useMode makes the server serve mode: through the admin plane, or with
// -spawn by (re)starting loadgen's own seqd in that mode.
func (r *runner) useMode(ctx context.Context, mode string) error {
	if r.adm == nil && !r.c.Spawn {
		if err := r.connectAdmin(ctx, r.c.Admin); err != nil {
			return err
		}
		r.rep.Server = r.c.Admin
	}
	if r.adm != nil {
		err := switchMode(ctx, r.adm, mode)
		if err == nil || !errors.Is(err, ErrModeSwitch) || !r.c.Spawn {
			return err
		}
		if err := r.closeServer(); err != nil {
			return err
		}
	}
	s, err := spawn(ctx, r.c, mode)
	if errors.Is(err, ErrNoSeqd) || errors.Is(err, ErrNoSpawner) {
		return err // no seqd to start, in any mode: the run fails
	}
	if err != nil {
		return fmt.Errorf("%w: %v", ErrModeSwitch, err)
	}
	r.srv, r.rep.Server = s, s.desc
	r.readyAt = time.Now().Add(spec.Holdoff)
	r.log.Info("spawned seqd", "mode", mode, "server", s.desc, "admin", s.admin)
	if err := r.connectAdmin(ctx, s.admin); err != nil {
		return err
	}
	return switchMode(ctx, r.adm, mode)
}

type snapshot struct {
	answers, retransmits, specMisses, timeouts uint64
	st                                         *adminpb.StatusResponse
	batches, requests                          uint64
	cpu                                        time.Duration // seqd's CPU time so far
	cpuOK                                      bool
}

func (r *runner) snap(ctx context.Context, cls []*client.Client) (snapshot, error) {
	var s snapshot
	for _, c := range cls {
		st := c.Stats()
		s.answers += st.Answers
		s.retransmits += st.Retransmits
		s.specMisses += st.SpecMisses
		s.timeouts += st.Timeouts
	}
	sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	st, err := r.adm.Status(sctx, &adminpb.StatusRequest{})
	if err != nil {
		return s, fmt.Errorf("loadgen: status: %w", err)
	}
	s.st = st
	pid := r.c.ServerPID
	if r.srv != nil {
		pid = r.srv.pid
	}
	s.cpu, s.cpuOK = serverCPU(pid)
	for _, w := range st.GetWorkers() {
		s.batches += w.GetBatches()
		s.requests += w.GetRequests()
	}
	return s, nil
}

// reserve makes sure the record pool holds rate×d calls (with a margin),
// within Config.VerifyMax.
func (r *runner) reserve(rate float64, d time.Duration, clients int) {
	total := min(rate*1.3*d.Seconds(), float64(r.c.VerifyMax))
	r.pool.reserve(int(total)/chunkCalls + 2*clients)
}

func (r *runner) runPoint(ctx context.Context, mode string, p Point, coalesce int) (Result, error) {
	c := r.c
	res := Result{Mode: mode, Clients: p.Clients, Window: p.Window}
	if f, _ := spec.Facts(mode); f.Ranges {
		res.Coalesce = &coalesce
	}
	qps := c.QPsFor(mode, p.Window)
	perQP := (p.Window + qps - 1) / qps
	quiet := slog.New(slog.NewTextHandler(logWriter{r.log}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	cls := make([]*client.Client, 0, p.Clients)
	defer func() {
		for _, cl := range cls {
			cl.Close()
		}
	}()
	for i := range p.Clients {
		opts := []client.Option{client.WithEndpoints(r.members...), client.WithDevice(c.Provider, c.Device, c.ProviderOpts),
			client.WithAdminDialOptions(c.adminOpts()...), client.WithQPs(qps),
			client.WithWindow(perQP), client.WithName(fmt.Sprintf("loadgen-%d", i)), client.WithLogger(quiet),
			client.WithCoalescing(coalesce), client.WithCongestionControl(c.CongestionControl)}
		if c.LinkMbps > 0 {
			opts = append(opts, client.WithLinkRate(c.LinkMbps*1e6))
		}
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		cl, err := client.Dial(dctx, r.addr, opts...)
		cancel()
		if err != nil {
			return res, fmt.Errorf("loadgen: %s: client %d: %w", mode, i, err)
		}
		cls = append(cls, cl)
		if err := clientMode(cl.Mode(), mode); err != nil {
			return res, err
		}
	}

	if d := time.Until(r.readyAt); d > 0 {
		r.log.Info("waiting for the new server's speculation hold-off", "wait", d.Round(time.Millisecond))
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return res, ctx.Err()
		}
	}
	// Record chunks for the warm-up, at the fastest rate this transport
	// can carry (the provider's own echo); halfway through the warm-up the
	// pool is topped up for the measured rate.
	rate := r.rep.Echo.Provider
	if rate == 0 {
		rate = 5e6
	}
	if c.Verify {
		r.reserve(rate, c.Warmup, p.Clients)
	}

	base := time.Now()
	from, until := int64(c.Warmup), int64(c.Warmup+c.Duration)
	drivers := make([]*driver, p.Clients)
	for i, cl := range cls {
		drivers[i] = newDriver(cl, p.Window, base, from, until, &r.pool, c.VerifyMax/p.Clients, c.Verify)
	}
	for i, d := range drivers {
		if err := d.start(); err != nil {
			for _, d := range drivers[:i] {
				d.stop.Store(true)
			}
			return res, err
		}
	}

	var before, after snapshot
	var err error
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	lastAns, lastT := uint64(0), time.Now()
	phase := 0 // 0 first half of the warm-up, 1 second half, 2 measuring, 3 done
	for phase < 3 {
		next := base.Add(time.Duration(from / 2))
		switch phase {
		case 1:
			next = base.Add(time.Duration(from))
		case 2:
			next = base.Add(time.Duration(until))
		}
		wait := time.NewTimer(time.Until(next))
		select {
		case <-ctx.Done():
			wait.Stop()
			for _, d := range drivers {
				d.stop.Store(true)
			}
			return res, ctx.Err()
		case <-tick.C:
			wait.Stop()
			if c.Progress != nil {
				var ans uint64
				for _, cl := range cls {
					ans += cl.Stats().Answers
				}
				now := time.Now()
				what := "warm-up"
				if phase == 2 {
					what = "measuring"
				}
				fmt.Fprintf(c.Progress, "loadgen: %-8s clients=%d window=%d coalesce=%d %-9s %5.1fs  %7.3f Mops/s  %d answers\n",
					mode, p.Clients, p.Window, coalesce, what, now.Sub(base).Seconds(),
					float64(ans-lastAns)/now.Sub(lastT).Seconds()/1e6, ans)
				lastAns, lastT = ans, now
			}
			continue
		case <-wait.C:
		}
		switch phase {
		case 0:
			if c.Verify {
				var ans uint64
				for _, cl := range cls {
					ans += cl.Stats().Answers
				}
				el := time.Since(base)
				r.reserve(float64(ans)/el.Seconds(), c.Duration+c.Warmup-el, p.Clients)
			}
		case 1:
			before, err = r.snap(ctx, cls)
		case 2:
			after, err = r.snap(ctx, cls)
		}
		if err != nil {
			for _, d := range drivers {
				d.stop.Store(true)
			}
			return res, err
		}
		phase++
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for _, d := range drivers {
		if err := d.wait(wctx); err != nil {
			return res, fmt.Errorf("loadgen: %s: %w", mode, err)
		}
	}

	h := hdrhistogram.New(histMin, histMax, histSig)
	res.MinTS = ^uint64(0)
	calls := make([][][]verify.Call, 0, len(drivers))
	for i, d := range drivers {
		h.Merge(d.hist)
		res.Answers += d.count
		res.Errors += d.errs
		res.MinTS, res.MaxTS = min(res.MinTS, d.minTS), max(res.MaxTS, d.maxTS)
		res.Unverified += d.unverified
		if d.firstErr != nil {
			r.log.Warn("requests failed", "mode", mode, "client", i, "failed", d.errs, "first", d.firstErr)
		}
		if d.grew > 0 {
			r.log.Info("record chunks allocated during the run", "client", i, "chunks", d.grew)
		}
		if c.Verify {
			calls = append(calls, d.calls())
		}
	}
	if res.MinTS == ^uint64(0) {
		res.MinTS = 0
	}
	us := func(q float64) float64 { return float64(h.ValueAtQuantile(q)) / 1e3 }
	res.ThroughputOps = float64(res.Answers) / c.Duration.Seconds()
	res.P50us, res.P90us, res.P99us, res.P999us = us(50), us(90), us(99), us(99.9)
	res.Maxus = float64(h.Max()) / 1e3
	res.Retransmits = after.retransmits - before.retransmits
	res.Timeouts = after.timeouts - before.timeouts
	res.SpecMisses = after.st.GetSpecMisses() - before.st.GetSpecMisses()
	if cm := after.specMisses - before.specMisses; res.SpecMisses == 0 {
		res.SpecMisses = cm // a mode whose server does not count them
	}
	res.Drops = after.st.GetDrops() - before.st.GetDrops()
	res.ServerPackets = after.st.GetProviderCounters()[verbs.CounterRxPackets] - before.st.GetProviderCounters()[verbs.CounterRxPackets]
	if before.cpuOK && after.cpuOK && after.cpu > before.cpu {
		res.ServerCPU = (after.cpu - before.cpu).Seconds()
		res.OpsPerServerCore = float64(res.Answers) / res.ServerCPU
	}
	if db := after.batches - before.batches; db > 0 {
		res.AvgBatch = float64(after.requests-before.requests) / float64(db)
	}
	if c.Verify {
		t0 := time.Now()
		rp := verify.CheckChunked(calls, 3)
		for _, cs := range calls {
			r.pool.put(cs)
		}
		res.Check, res.Verified = &rp, rp.Calls
		r.log.Info("verified", "mode", mode, "calls", rp.Calls, "violations", rp.Violations(),
			"unverified", res.Unverified, "took", time.Since(t0).Round(time.Millisecond))
	}
	r.log.Info("point done", "mode", mode, "clients", p.Clients, "window", p.Window, "coalesce", coalesce,
		"server_packets", res.ServerPackets, "server_cpu_s", res.ServerCPU,
		"throughput_ops", int64(res.ThroughputOps), "p50_us", res.P50us, "p99_us", res.P99us)
	return res, nil
}

// logWriter forwards the clients' warnings to loadgen's logger.
type logWriter struct{ l *slog.Logger }

func (w logWriter) Write(p []byte) (int, error) {
	w.l.Warn("client", "msg", string(p))
	return len(p), nil
}
