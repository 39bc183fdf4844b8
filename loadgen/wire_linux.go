package loadgen

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

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
	Mode         string  `json:"mode,omitempty"` // seqd's: spec-s0 or herd
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

// measureWire runs g against its target and fills a WireResult, with the
// server's CPU time read (on the generator's thread) when the
// measurement starts and ends.
func measureWire(ctx context.Context, c *Config, g *wire.Gen, server string, cpu cpuOf) (WireResult, error) {
	wr := WireResult{Server: server, Flows: g.Flows(), Window: g.Window()}
	var before, after, gbefore, gafter wire.CPU
	var cerr, gerr error
	res, err := g.Run(ctx, c.Warmup, c.Duration, func(start bool) {
		tid := unix.Gettid() // Run's thread: the generator's
		cpu.genTID = tid
		var e, ge error
		if start {
			before, e = cpu.read()
			gbefore, ge = wire.ReadCPU(0, tid)
		} else {
			after, e = cpu.read()
			gafter, ge = wire.ReadCPU(0, tid)
		}
		cerr, gerr = errors.Join(cerr, e), errors.Join(gerr, ge)
	})
	if res == nil {
		return wr, err
	}
	wr.Mops = res.OpsPerSec() / 1e6
	if res.Measured > 0 && cerr == nil {
		d := after.Sub(before)
		wr.UserNsPerReq = float64(d.User.Nanoseconds()) / float64(res.Measured)
		wr.SysNsPerReq = float64(d.Sys.Nanoseconds()) / float64(res.Measured)
		wr.CPUFrom = cpu.String()
	}
	if res.Measured > 0 && gerr == nil {
		d := gafter.Sub(gbefore)
		wr.GenUserNsPerReq = float64(d.User.Nanoseconds()) / float64(res.Measured)
		wr.GenSysNsPerReq = float64(d.Sys.Nanoseconds()) / float64(res.Measured)
	}
	if res.MeasuredSeconds > 0 {
		wr.GenBusy = res.BusySeconds / res.MeasuredSeconds
	}
	us := func(q float64) float64 { return float64(res.Hist.ValueAtQuantile(q)) / 1e3 }
	wr.P50us, wr.P99us, wr.P999us = us(50), us(99), us(99.9)
	wr.Lost, wr.Stale, wr.SpecMisses, wr.Violations, wr.Checked = res.Lost, res.Stale, res.SpecMisses, res.Violations(), res.Kept
	if c.Progress != nil {
		fmt.Fprintf(c.Progress, "loadgen: wire %-13s flows=%-5d window=%-3d %7.3f Mops/s  server %5.0f ns/req user, %5.0f sys  generator %4.0f+%4.0f busy %3.0f%%  p50 %.0f µs  lost %d  stale %d  checked %d  send waits %d errors %d\n",
			server, wr.Flows, wr.Window, wr.Mops, wr.UserNsPerReq, wr.SysNsPerReq, wr.GenUserNsPerReq, wr.GenSysNsPerReq, 100*wr.GenBusy,
			wr.P50us, wr.Lost, wr.Stale, wr.Checked, res.SendWaits, res.SendErrors)
	}
	if err != nil {
		for _, ex := range res.Examples {
			c.Logger.Error("violation", "server", server, "flows", wr.Flows, "example", ex)
		}
		return wr, fmt.Errorf("loadgen: wire %s flows=%d: %w", server, wr.Flows, err)
	}
	return wr, nil
}

// runWire is Run for -engine wire: for each flow count the floors (the
// provider's echo server and the raw UDP echo, on the server core), then
// seqd in Spec-S0; then Redis INCR. Violations fail the run.
func runWire(ctx context.Context, c *Config, rep *Report) error {
	log := c.Logger
	if err := pinProcess(c.Cores); err != nil {
		return err
	}
	r := &runner{c: c, log: log, rep: rep}
	defer r.closeServer()
	floors := map[int][2]float64{} // by flow count: provider echo, raw echo
	for mi, mode := range c.Modes {
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
			if mode == spec.ModeHERD {
				w = min(w, spec.HERDMaxWindow)
			}
			g, err := wire.New(wire.Config{Flows: f, Window: w, InFlight: c.InFlight, Timeout: c.FlowTimeout})
			if err != nil {
				return err
			}
			if mi == 0 && !c.NoFloors {
				fl, err := measureFloors(ctx, c, rep, g, f, w)
				if err != nil {
					g.Close()
					return err
				}
				floors[f] = fl
			}
			wr, err := measureSeqd(ctx, c, r, g, mode, cpu)
			g.Close()
			fl := floors[f]
			if fl[0] > 0 {
				wr.OfProviderEcho = wr.Mops / fl[0]
			}
			if fl[1] > 0 {
				wr.OfRawEcho = wr.Mops / fl[1]
			}
			rep.Wire = append(rep.Wire, wr)
			if err != nil {
				rep.Violations += int(wr.Violations)
				return err
			}
		}
	}
	if !c.NoRedis {
		rep.Redis = measureRedis(ctx, c)
	}
	return r.closeServer()
}

// measureFloors measures the provider's echo server and the raw UDP echo
// with g's flows, each in a process of its own on the server core.
func measureFloors(ctx context.Context, c *Config, rep *Report, g *wire.Gen, f, w int) ([2]float64, error) {
	var fl [2]float64
	for k, kind := range []wire.Kind{wire.ProviderEcho, wire.RawEcho} {
		fp, err := startFloor(ctx, c, kind, f*w+1024)
		if err == nil {
			err = g.SetTarget(fp.target(f, w))
		}
		var wr WireResult
		if err == nil {
			wr, err = measureWire(ctx, c, g, kind.String(), cpuOf{pid: fp.pid()})
		}
		if fp != nil {
			err = errors.Join(err, fp.stop())
		}
		if err != nil {
			return fl, err
		}
		fl[k] = wr.Mops
		rep.Wire = append(rep.Wire, wr)
	}
	return fl, nil
}

// measureSeqd admits g's flows to seqd in mode and measures it, with its
// drops and mean batch from Status around the run.
func measureSeqd(ctx context.Context, c *Config, r *runner, g *wire.Gen, mode string, cpu cpuOf) (WireResult, error) {
	ss, err := wire.Admit(ctx, r.adm, g, mode, 0, "loadgen-wire")
	if err != nil {
		return WireResult{Server: "seqd", Mode: mode, Flows: g.Flows()}, err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		ss.Close(cctx)
		cancel()
	}()
	st0, serr := r.adm.Status(ctx, &adminpb.StatusRequest{})
	wr, err := measureWire(ctx, c, g, "seqd", cpu)
	wr.Mode = mode
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
	return wr, err
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
