package loadgen

import (
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/seqd/seqd/spec"
)

// CheckPlotPath accepts the file types Plot can draw.
func CheckPlotPath(path string) error {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".png", ".svg":
		return nil
	}
	return fmt.Errorf("%w: -plot %q: want a .png or .svg file", ErrConfig, path)
}

// modeOrder lists the distinct modes of the results, first-seen order.
func (r *Report) modeOrder() []string {
	var ms []string
	for _, x := range r.Results {
		if !slices.Contains(ms, x.Mode) {
			ms = append(ms, x.Mode)
		}
	}
	return ms
}

// Plot draws the report to path (.png or .svg): on the left each mode's
// best throughput as a bar, against the echo floors measured in the same
// run; on the right latency (p50 solid, p99 dashed, log scale) against
// throughput for every point run, one colour per mode — the thesis's
// Figures 4.16 and 4.17 for this machine.
func (r *Report) Plot(path string) error {
	if err := CheckPlotPath(path); err != nil {
		return err
	}
	bars, curve, err := r.wirePlots()
	if len(r.Wire) == 0 {
		if bars, err = r.throughputPlot(); err == nil {
			curve, err = r.latencyPlot()
		}
	}
	if err != nil {
		return err
	}
	const w, h = 32 * vg.Centimeter, 13 * vg.Centimeter
	var c interface {
		vg.CanvasWriterTo
	}
	if strings.EqualFold(filepath.Ext(path), ".svg") {
		c = vgsvg.New(w, h)
	} else {
		c = vgimg.PngCanvas{Canvas: vgimg.NewWith(vgimg.UseWH(w, h), vgimg.UseDPI(110))}
	}
	dc := draw.New(c)
	tiles := draw.Tiles{Rows: 1, Cols: 2, PadX: vg.Centimeter, PadTop: vg.Millimeter * 3, PadBottom: vg.Millimeter * 3,
		PadLeft: vg.Millimeter * 3, PadRight: vg.Millimeter * 5}
	bars.Draw(tiles.At(dc, 0, 0))
	curve.Draw(tiles.At(dc, 1, 0))
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("loadgen: plot: %w", err)
	}
	if _, err := c.WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("loadgen: plot: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("loadgen: plot: %w", err)
	}
	return nil
}

func (r *Report) throughputPlot() (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "Throughput per mode (best point)"
	p.Y.Label.Text = "timestamps per second (millions)"
	p.X.Label.Text = "mode"
	p.Legend.Top = true
	modes := r.modeOrder()
	top := 0.0
	for i, m := range modes {
		best := 0.0
		for _, x := range r.Results {
			if x.Mode == m {
				best = max(best, x.ThroughputOps/1e6)
			}
		}
		top = max(top, best)
		b, err := plotter.NewBarChart(plotter.Values{best}, vg.Points(40))
		if err != nil {
			return nil, fmt.Errorf("loadgen: plot: %w", err)
		}
		b.XMin = float64(i)
		b.Color = plotutil.Color(i)
		b.LineStyle.Width = 0
		p.Add(b)
		label := fmt.Sprintf("%.2f M/s", best)
		if r.EchoFloorOps > 0 {
			label += fmt.Sprintf("\n%.0f%% of floor", 100*best*1e6/r.EchoFloorOps)
		}
		l, err := plotter.NewLabels(plotter.XYLabels{XYs: plotter.XYs{{X: float64(i), Y: best}}, Labels: []string{label}})
		if err != nil {
			return nil, fmt.Errorf("loadgen: plot: %w", err)
		}
		l.Offset = vg.Point{X: -vg.Points(22), Y: vg.Points(4)}
		p.Add(l)
	}
	p.NominalX(modes...)
	for k, fl := range []struct {
		name string
		v    float64
		dash []vg.Length
	}{
		{"raw UDP GSO/GRO echo (echo floor)", r.Echo.RawUDP, []vg.Length{vg.Points(6), vg.Points(3)}},
		{"provider header-only UD echo", r.Echo.Provider, []vg.Length{vg.Points(2), vg.Points(2)}},
	} {
		if fl.v <= 0 {
			continue
		}
		top = max(top, fl.v/1e6)
		ln, err := plotter.NewLine(plotter.XYs{{X: -0.5, Y: fl.v / 1e6}, {X: float64(len(modes)) - 0.5, Y: fl.v / 1e6}})
		if err != nil {
			return nil, fmt.Errorf("loadgen: plot: %w", err)
		}
		ln.Color = color.Gray{Y: uint8(40 + 60*k)}
		ln.Dashes = fl.dash
		ln.Width = vg.Points(1.5)
		p.Add(ln)
		p.Legend.Add(fl.name, ln)
	}
	p.Y.Min, p.Y.Max = 0, top*1.25
	p.X.Min, p.X.Max = -0.6, float64(len(modes))-0.4
	p.Add(plotter.NewGrid())
	return p, nil
}

func (r *Report) latencyPlot() (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "Latency against throughput (p50 solid, p99 dashed)"
	p.X.Label.Text = "throughput (million timestamps per second)"
	p.Y.Label.Text = "latency (µs, log scale)"
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	// The legend goes top right, in a decade of head room above the
	// slowest point, so that it never covers one.
	p.Legend.Top = true
	p.Legend.XOffs = -vg.Millimeter * 2
	lo, hi, right := 1e18, 0.0, 0.0
	for i, m := range r.modeOrder() {
		var pts []Result
		for _, x := range r.Results {
			if x.Mode == m && x.P50us > 0 {
				pts = append(pts, x)
			}
		}
		slices.SortFunc(pts, func(a, b Result) int {
			if a.ThroughputOps < b.ThroughputOps {
				return -1
			}
			return 1
		})
		for q, get := range []func(Result) float64{
			func(x Result) float64 { return x.P50us },
			func(x Result) float64 { return x.P99us },
		} {
			xys := make(plotter.XYs, len(pts))
			for j, x := range pts {
				xys[j] = plotter.XY{X: x.ThroughputOps / 1e6, Y: max(get(x), 0.1)}
				lo, hi, right = min(lo, xys[j].Y), max(hi, xys[j].Y), max(right, xys[j].X)
			}
			if len(xys) == 0 {
				continue
			}
			ln, sc, err := plotter.NewLinePoints(xys)
			if err != nil {
				return nil, fmt.Errorf("loadgen: plot: %w", err)
			}
			ln.Color, sc.Color = plotutil.Color(i), plotutil.Color(i)
			ln.Width = vg.Points(1.5)
			sc.Shape = draw.CircleGlyph{}
			if q == 1 {
				ln.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
				sc.Shape = draw.TriangleGlyph{}
			}
			p.Add(ln, sc)
			p.Legend.Add(fmt.Sprintf("%s %s", m, []string{"p50", "p99"}[q]), ln, sc)
		}
		// label each point with its load (clients × window)
		var lx plotter.XYLabels
		for _, x := range pts {
			lx.XYs = append(lx.XYs, plotter.XY{X: x.ThroughputOps / 1e6, Y: max(x.P50us, 0.1)})
			lx.Labels = append(lx.Labels, fmt.Sprintf("%d×%d", x.Clients, x.Window))
		}
		if len(lx.XYs) > 0 {
			l, err := plotter.NewLabels(lx)
			if err != nil {
				return nil, fmt.Errorf("loadgen: plot: %w", err)
			}
			l.Offset = vg.Point{X: vg.Points(4), Y: -vg.Points(12)}
			p.Add(l)
		}
	}
	if hi > 0 {
		p.Y.Min, p.Y.Max = lo/1.5, hi*10
	}
	p.X.Min, p.X.Max = 0, right*1.15
	p.Add(plotter.NewGrid())
	return p, nil
}

// wireServers are the wire engine's servers, in the order they are drawn.
var wireServers = []string{"provider-echo", "raw-echo", "seqd"}

// wirePlots draws the wire engine's results: per flow count, each
// server's throughput as a bar (Redis INCR as a line), and each server's
// CPU time per request, user and kernel.
func (r *Report) wirePlots() (thr, cpu *plot.Plot, err error) {
	if len(r.Wire) == 0 {
		return nil, nil, nil
	}
	var flows []int
	for _, x := range r.Wire {
		if !slices.Contains(flows, x.Flows) {
			flows = append(flows, x.Flows)
		}
	}
	names := make([]string, len(flows))
	for i, f := range flows {
		names[i] = fmt.Sprintf("%d flows", f)
	}
	thr, cpu = plot.New(), plot.New()
	thr.Title.Text = "Throughput per flow count (same run, same server core)"
	thr.Y.Label.Text = "requests per second (millions)"
	cpu.Title.Text = "Server CPU per request (user + kernel)"
	cpu.Y.Label.Text = "ns per request"
	for _, p := range []*plot.Plot{thr, cpu} {
		p.Legend.Top = true
		p.NominalX(names...)
		p.Add(plotter.NewGrid())
	}
	const bw = 16
	topM, topN := 0.0, 0.0
	for k, srv := range wireServers {
		mops := make(plotter.Values, len(flows))
		ns := make(plotter.Values, len(flows))
		for i, f := range flows {
			for _, x := range r.Wire {
				if x.Server == srv && x.Flows == f && (x.Mode == "" || x.Mode == spec.ModeSpecS0) {
					mops[i], ns[i] = x.Mops, x.UserNsPerReq+x.SysNsPerReq
					topM, topN = max(topM, mops[i]), max(topN, ns[i])
				}
			}
		}
		for j, p := range []*plot.Plot{thr, cpu} {
			vals := mops
			if j == 1 {
				vals = ns
			}
			b, err := plotter.NewBarChart(vals, vg.Points(bw))
			if err != nil {
				return nil, nil, fmt.Errorf("loadgen: plot: %w", err)
			}
			b.Offset = vg.Points(float64((k - 1) * bw))
			b.Color = plotutil.Color(k)
			b.LineStyle.Width = 0
			p.Add(b)
			p.Legend.Add(srv, b)
		}
	}
	if x := r.Redis; x != nil && x.Ops > 0 {
		ln, err := plotter.NewLine(plotter.XYs{{X: -0.5, Y: x.Ops / 1e6}, {X: float64(len(flows)) - 0.5, Y: x.Ops / 1e6}})
		if err != nil {
			return nil, nil, fmt.Errorf("loadgen: plot: %w", err)
		}
		ln.Dashes = []vg.Length{vg.Points(6), vg.Points(3)}
		ln.Width = vg.Points(1.5)
		thr.Add(ln)
		thr.Legend.Add(fmt.Sprintf("redis INCR -c %d -P %d", x.Conns, x.Pipeline), ln)
		topM = max(topM, x.Ops/1e6)
	}
	thr.Y.Min, thr.Y.Max, cpu.Y.Min, cpu.Y.Max = 0, topM*1.4+0.01, 0, topN*1.4+1
	for _, p := range []*plot.Plot{thr, cpu} {
		p.X.Min, p.X.Max = -0.6, float64(len(flows))-0.4
	}
	return thr, cpu, nil
}
