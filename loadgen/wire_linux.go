package loadgen

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"golang.org/x/sys/unix"

	"github.com/seqd/seqd/admin/adminpb"
	"github.com/seqd/seqd/loadgen/wire"
	"github.com/seqd/seqd/spec"
)

// WireResult is one server at one flow count, measured by the wire
// generator. Ratios are to the floors measured at the same flow count in
// the same run.
type WireResult struct {
	Server       string  `json:"server"`         // seqd, provider-echo, raw-echo
	Mode         string  `json:"mode,omitempty"` // seqd's: one of spec.WireModes
	Flows        int     `json:"flows"`
	Window       int     `json:"window"` // per flow
	Mops         float64 `json:"mops"`
	UserNsPerReq float64 `json:"server_user_ns_per_req"`
	SysNsPerReq  float64 `json:"server_sys_ns_per_req"`
	CPUFrom      string  `json:"cpu_from"` // where the server's CPU time was read
	// The generator's own CPU time per request (its thread's), for
	// comparison: it must stay well below the server's.
	GenUserNsPerReq float64 `json:"gen_user_ns_per_req"`
	GenSysNsPerReq  float64 `json:"gen_sys_ns_per_req"`
	// GenBusy is the fraction of the measured interval the generator's
	// loop moved packets (wire.Stats.BusySeconds): near 1, the generator
	// is the bottleneck.
	GenBusy    float64 `json:"gen_busy"`
	P50us      float64 `json:"p50_us"`
	P99us      float64 `json:"p99_us"`
	P999us     float64 `json:"p999_us"`
	P9999us    float64 `json:"p9999_us"`
	Lost       uint64  `json:"lost"`
	Stale      uint64  `json:"stale"`
	SpecMisses uint64  `json:"spec_misses"`
	Violations uint64  `json:"violations"`
	Checked    int     `json:"checked"` // values checked for uniqueness
	// seqd: the requests its workers dropped (Status drops) and their mean
	// batch, over the whole run (warm-up included).
	ServerDrops uint64  `json:"server_drops,omitempty"`
	AvgBatch    float64 `json:"avg_batch,omitempty"`
	// OfProviderEcho and OfRawEcho: Mops over the floors' at this flow
	// count (0 when not measured).
	OfProviderEcho float64 `json:"of_provider_echo,omitempty"`
	OfRawEcho      float64 `json:"of_raw_echo,omitempty"`
	// seqd: how long admitting the flows took (wire.Admit: one Connect
	// per DefaultPerSession flows), and its resident memory's growth
	// over the admission per flow (0 when its process is not known).
	AdmitSeconds       float64 `json:"admit_seconds,omitempty"`
	ServerBytesPerFlow float64 `json:"server_bytes_per_flow,omitempty"`
}

// flowWindow is the window per flow for f flows: w if set, else the
// requests in flight over all flows shared out, 1 to 256 per flow (seqd's
// default -max-window).
func flowWindow(f, w, inflight int) int {
	if w > 0 {
		return w
	}
	return max(1, min(256, inflight/f))
}

// pinPID pins every thread of process pid to core.
func pinPID(pid, core int) error {
	var set unix.CPUSet
	set.Set(core)
	ents, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	if err != nil {
		return fmt.Errorf("loadgen: pin %d: %w", pid, err)
	}
	for _, e := range ents {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			if err := unix.SchedSetaffinity(tid, &set); err != nil {
				return fmt.Errorf("loadgen: pin thread %d of %d to %d: %w", tid, pid, core, err)
			}
		}
	}
	return nil
}

// cpuOf reads the CPU time of the server under test: a process (pid >
// 0), one thread of this process (tid > 0), or this process minus the
// generator's thread (an in-process seqd).
type cpuOf struct {
	pid, tid, genTID int
	none             bool // not known: a seqd loadgen did not start, without -server-pid
}

func (c cpuOf) read() (wire.CPU, error) {
	switch {
	case c.none:
		return wire.CPU{}, errNoCPU
	case c.pid > 0:
		return wire.ReadCPU(c.pid, 0)
	case c.tid > 0:
		return wire.ReadCPU(0, c.tid)
	}
	all, err := wire.ReadCPU(0, 0)
	if err != nil {
		return all, err
	}
	gen, err := wire.ReadCPU(0, c.genTID)
	return all.Sub(gen), err
}

func (c cpuOf) String() string {
	switch {
	case c.pid > 0:
		return fmt.Sprintf("/proc/%d/stat", c.pid)
	case c.tid > 0:
		return fmt.Sprintf("/proc/self/task/%d/stat", c.tid)
	}
	return "/proc/self/stat minus the generator's thread"
}

var errNoCPU = errors.New("loadgen: server CPU not measured (no -server-pid)")

// wireTarget is one server measured at a flow count: its generator,
// what ends it, and the measured slices folded together.
type wireTarget struct {
	g             *wire.Gen
	close         func() error
	server        string
	flows, window int
	cpu           cpuOf
	st            wire.Stats
	hist          *hdrhistogram.Histogram
	ex            []string
	kept          int
	srv, gen      wire.CPU // sums over the slices
	cerr, gerr    error
}

func newWireTarget(server string, g *wire.Gen, cpu cpuOf, close func() error) *wireTarget {
	return &wireTarget{g: g, close: close, server: server, flows: g.Flows(), window: g.Window(), cpu: cpu,
		hist: hdrhistogram.New(1, int64(60*time.Second), 3)}
}

// measure runs t.g against its target for one slice (warm-up, then d
// measured) and adds it to t, with the server's CPU time and the
// generator thread's read (on the generator's thread) when the
// measurement starts and ends. It returns the run's error: violations
// among them.
func (t *wireTarget) measure(ctx context.Context, warmup, d time.Duration) error {
	var before, after, gbefore, gafter wire.CPU
	var cerr, gerr error
	res, err := t.g.Run(ctx, warmup, d, func(start bool) {
		tid := unix.Gettid() // Run's thread: the generator's
		t.cpu.genTID = tid
		var e, ge error
		if start {
			before, e = t.cpu.read()
			gbefore, ge = wire.ReadCPU(0, tid)
		} else {
			after, e = t.cpu.read()
			gafter, ge = wire.ReadCPU(0, tid)
		}
		cerr, gerr = errors.Join(cerr, e), errors.Join(gerr, ge)
	})
	if res == nil {
		return err
	}
	t.st.Add(res.Stats)
	t.hist.Merge(res.Hist)
	for _, ex := range res.Examples {
		if len(t.ex) < 8 {
			t.ex = append(t.ex, ex)
		}
	}
	t.kept += res.Kept
	t.cerr, t.gerr = errors.Join(t.cerr, cerr), errors.Join(t.gerr, gerr)
	t.srv, t.gen = t.srv.Add(after.Sub(before)), t.gen.Add(gafter.Sub(gbefore))
	return err
}

// result is the WireResult of the slices measured, reported on
// c.Progress; err (a slice's) is returned wrapped, with the violations'
// examples logged.
func (t *wireTarget) result(c *Config, err error) (WireResult, error) {
	wr := WireResult{Server: t.server, Flows: t.flows, Window: t.window}
	st := &t.st
	if st.MeasuredSeconds > 0 {
		wr.Mops = float64(st.Measured) / st.MeasuredSeconds / 1e6
		wr.GenBusy = st.BusySeconds / st.MeasuredSeconds
	}
	if st.Measured > 0 && t.cerr == nil {
		wr.UserNsPerReq = float64(t.srv.User.Nanoseconds()) / float64(st.Measured)
		wr.SysNsPerReq = float64(t.srv.Sys.Nanoseconds()) / float64(st.Measured)
		wr.CPUFrom = t.cpu.String()
	}
	if st.Measured > 0 && t.gerr == nil {
		wr.GenUserNsPerReq = float64(t.gen.User.Nanoseconds()) / float64(st.Measured)
		wr.GenSysNsPerReq = float64(t.gen.Sys.Nanoseconds()) / float64(st.Measured)
	}
	us := func(q float64) float64 { return float64(t.hist.ValueAtQuantile(q)) / 1e3 }
	wr.P50us, wr.P99us, wr.P999us, wr.P9999us = us(50), us(99), us(99.9), us(99.99)
	wr.Lost, wr.Stale, wr.SpecMisses, wr.Violations, wr.Checked = st.Lost, st.Stale, st.SpecMisses, st.Violations(), t.kept
	if c.Progress != nil {
		fmt.Fprintf(c.Progress, "loadgen: wire %-13s flows=%-5d window=%-3d %7.3f Mops/s  server %5.0f ns/req user, %5.0f sys  generator %4.0f+%4.0f busy %3.0f%%  p50 %.0f µs  lost %d  stale %d  checked %d  send waits %d errors %d\n",
			t.server, wr.Flows, wr.Window, wr.Mops, wr.UserNsPerReq, wr.SysNsPerReq, wr.GenUserNsPerReq, wr.GenSysNsPerReq, 100*wr.GenBusy,
			wr.P50us, wr.Lost, wr.Stale, wr.Checked, st.SendWaits, st.SendErrors)
	}
	if err != nil {
		for _, ex := range t.ex {
			c.Logger.Error("violation", "server", t.server, "flows", wr.Flows, "example", ex)
		}
		return wr, fmt.Errorf("loadgen: wire %s flows=%d: %w", t.server, wr.Flows, err)
	}
	return wr, nil
}

// runWire is Run for -engine wire: for each flow count the floors (the
// provider's echo server and the raw UDP echo, on the server core) and
// seqd in Spec-S0, in turn, each measured in c.Slices slices taken
// round robin (so that a slow phase of a shared machine weighs on all of
// them alike); then Redis INCR. Violations fail the run.
func runWire(ctx context.Context, c *Config, rep *Report) error {
	log := c.Logger
	if err := pinProcess(c.Cores); err != nil {
		return err
	}
	r := &runner{c: c, log: log, rep: rep}
	defer r.closeServer()
	floors := map[int]*[2]float64{} // by flow count: provider echo, raw echo
	first := true                   // the floors are measured with the first wire mode
	for _, mode := range c.Modes {
		if f, _ := spec.Facts(mode); !f.Wire {
			log.Info("the wire generator does not speak this mode: measuring it through the client library",
				"mode", mode, "clients", c.Clients, "window", c.Window)
			if err := r.clientMode(ctx, mode); err != nil {
				return err
			}
			continue
		}
		if err := r.useMode(ctx, mode); err != nil {
			return err
		}
		cpu := cpuOf{pid: c.ServerPID, none: c.ServerPID == 0}
		if r.srv != nil {
			cpu.pid, cpu.none = r.srv.pid, false
			if cpu.pid > 0 && c.ServerCore >= 0 {
				if err := pinPID(cpu.pid, c.ServerCore); err != nil {
					return err
				}
			}
		}
		if d := time.Until(r.readyAt); d > 0 && mode == spec.ModeSpecS0 {
			log.Info("waiting for the new server's speculation hold-off", "wait", d.Round(time.Millisecond))
			select {
			case <-time.After(d):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		for _, f := range c.Flows {
			w := flowWindow(f, c.FlowWindow, c.InFlight)
			switch mode {
			case spec.ModeHERD:
				w = min(w, spec.HERDMaxWindow)
			case spec.ModeERPC:
				w = min(w, spec.ERPCSlots) // a session's requests in flight
			}
			fl := floors[f]
			if fl == nil {
				fl = new([2]float64)
				floors[f] = fl
			}
			if err := measureFlows(ctx, c, r, rep, mode, cpu, f, w, fl, first && !c.NoFloors); err != nil {
				return err
			}
		}
		first = false
	}
	if !c.NoRedis {
		rep.Redis = measureRedis(ctx, c)
	}
	return r.closeServer()
}

// measureFlows measures, at f flows of window w, the floors (when
// floors: their Mops go to fl) and seqd in mode, slice by slice in turn,
// and adds their results to rep: the floors', then seqd's with its
// ratios to fl.
func measureFlows(ctx context.Context, c *Config, r *runner, rep *Report, mode string, cpu cpuOf, f, w int, fl *[2]float64, floors bool) (err error) {
	var ts []*wireTarget
	defer func() {
		for _, t := range ts {
			err = errors.Join(err, t.close())
		}
	}()
	newGen := func() (*wire.Gen, error) {
		var src netip.Addr
		if c.WireSource != "" {
			var err error
			if src, err = netip.ParseAddr(c.WireSource); err != nil {
				return nil, fmt.Errorf("%w: -wire-source: %v", ErrConfig, err)
			}
		}
		return wire.New(wire.Config{Flows: f, Window: w, InFlight: c.InFlight, Timeout: c.FlowTimeout, Source: src, Sources: c.WireSources, Credits: c.FlowWindow})
	}
	if floors {
		for _, kind := range []wire.Kind{wire.ProviderEcho, wire.RawEcho} {
			g, err := newGen()
			if err != nil {
				return err
			}
			fp, err := startFloor(ctx, c, kind, f*w+1024)
			if err != nil {
				g.Close()
				return err
			}
			ts = append(ts, newWireTarget(kind.String(), g, cpuOf{pid: fp.pid()}, func() error { g.Close(); return fp.stop() }))
			if err := g.SetTarget(fp.target(f, w)); err != nil {
				return err
			}
		}
	}
	g, err := newGen()
	if err != nil {
		return err
	}
	rss0, rerr := serverRSS(cpu)
	began := time.Now()
	ss, err := wire.Admit(ctx, r.adm, g, mode, 0, "loadgen-wire")
	admitted := time.Since(began)
	rss1, rerr1 := serverRSS(cpu)
	if err != nil {
		g.Close()
		rep.Wire = append(rep.Wire, WireResult{Server: "seqd", Mode: mode, Flows: f})
		return err
	}
	seqd := newWireTarget("seqd", g, cpu, func() error {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		ss.Close(cctx)
		g.Close()
		return nil
	})
	ts = append(ts, seqd)
	// seqd's drops and mean batch, from Status around the slices.
	st0, serr := r.adm.Status(ctx, &adminpb.StatusRequest{})
	n := max(c.Slices, 1)
	warmup, d := c.Warmup/time.Duration(n), c.Duration/time.Duration(n)
	errs := make([]error, len(ts))
	for range n {
		for i, t := range ts {
			if errs[i] = t.measure(ctx, warmup, d); errs[i] != nil {
				break
			}
		}
		if errors.Join(errs...) != nil {
			break
		}
	}
	for i, t := range ts[:len(ts)-1] {
		wr, err := t.result(c, errs[i])
		rep.Wire = append(rep.Wire, wr)
		if err != nil {
			return err
		}
		fl[i] = wr.Mops
	}
	wr, err := seqd.result(c, errs[len(ts)-1])
	wr.Mode = mode
	wr.AdmitSeconds = admitted.Seconds()
	if rerr == nil && rerr1 == nil {
		wr.ServerBytesPerFlow = float64(rss1-rss0) / float64(f)
	}
	if st1, serr1 := r.adm.Status(ctx, &adminpb.StatusRequest{}); serr == nil && serr1 == nil {
		wr.ServerDrops = st1.GetDrops() - st0.GetDrops()
		var b, q int64
		for i, w := range st1.GetWorkers() {
			b += int64(w.GetBatches())
			q += int64(w.GetRequests())
			if i < len(st0.GetWorkers()) {
				b -= int64(st0.GetWorkers()[i].GetBatches())
				q -= int64(st0.GetWorkers()[i].GetRequests())
			}
		}
		if b > 0 {
			wr.AvgBatch = float64(q) / float64(b)
		}
	}
	if fl[0] > 0 {
		wr.OfProviderEcho = wr.Mops / fl[0]
	}
	if fl[1] > 0 {
		wr.OfRawEcho = wr.Mops / fl[1]
	}
	rep.Wire = append(rep.Wire, wr)
	if err != nil {
		rep.Violations += int(wr.Violations)
	}
	return err
}

// serverRSS is the resident memory of the seqd whose CPU cpu reads,
// when it is another process (a spawned seqd, -server-pid).
func serverRSS(cpu cpuOf) (int64, error) {
	if cpu.pid <= 0 {
		return 0, errNoCPU
	}
	return wire.ReadRSS(cpu.pid)
}

// measureRedis measures the Redis INCR reference, or says why not.
func measureRedis(ctx context.Context, c *Config) *RedisResult {
	res := &RedisResult{Conns: RedisConns, Pipeline: RedisPipeline}
	s, err := startRedis(ctx)
	if err != nil {
		res.Skipped = err.Error()
		c.Logger.Warn("redis reference skipped", "err", err)
		return res
	}
	defer s.stop()
	if c.ServerCore >= 0 {
		if err := pinPID(s.pid(), c.ServerCore); err != nil {
			res.Skipped = err.Error()
			return res
		}
	}
	var before, after wire.CPU
	var cerr error
	ops, err := driveRedis(ctx, s.addr, c.Warmup, c.Duration, func(start bool) {
		var e error
		if start {
			before, e = wire.ReadCPU(s.pid(), 0)
		} else {
			after, e = wire.ReadCPU(s.pid(), 0)
		}
		cerr = errors.Join(cerr, e)
	})
	if err != nil {
		res.Skipped = err.Error()
		c.Logger.Warn("redis reference failed", "err", err)
		return res
	}
	res.Ops = ops
	if n := ops * c.Duration.Seconds(); n > 0 && cerr == nil {
		d := after.Sub(before)
		res.UserNsPerReq, res.SysNsPerReq = float64(d.User.Nanoseconds())/n, float64(d.Sys.Nanoseconds())/n
	}
	if c.Progress != nil {
		fmt.Fprintf(c.Progress, "loadgen: redis INCR -c %d -P %d: %.3f Mops/s  server %5.0f ns/req user, %5.0f sys\n",
			RedisConns, RedisPipeline, ops/1e6, res.UserNsPerReq, res.SysNsPerReq)
	}
	return res
}
