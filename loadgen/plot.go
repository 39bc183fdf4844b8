package loadgen

import (
	"bytes"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/text"
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

// The figure's size, and the panels' legends' text.
const (
	figW, figH   = 32 * vg.Centimeter, 15 * vg.Centimeter
	legendFont   = 9 // points
	headingFont  = 11
	legendThumb  = 18 // points
	legendPadRow = 1  // points between rows
	legendPadCol = 12 // points between columns
)

// A figure is what Plot draws: a heading with the run's parameters, and
// panels side by side, each a gonum plot with its legend in a strip
// beneath it, outside the data area, so that it never covers a point.
type figure struct {
	heading string
	panels  []*panel
}

// A panel is one plot, its legend entries, and every point it draws (in
// data coordinates; a bar's top with its offset from the category), so
// that a test can check that nothing drawn lies under the legend.
type panel struct {
	p      *plot.Plot
	legend []legendEntry
	marks  []mark
}

type legendEntry struct {
	name   string
	thumbs []plot.Thumbnailer
}

type mark struct {
	xy plotter.XY
	dx vg.Length // a bar's offset from its category
}

func (pn *panel) add(name string, thumbs ...plot.Thumbnailer) {
	pn.legend = append(pn.legend, legendEntry{name, thumbs})
}

func (pn *panel) mark(x, y float64, dx vg.Length) {
	pn.marks = append(pn.marks, mark{plotter.XY{X: x, Y: y}, dx})
}

// geometry is where a drawn figure put things, in canvas coordinates
// (points, origin bottom left).
type geometry struct {
	Canvas  vg.Rectangle
	Heading vg.Rectangle
	Panels  []panelGeometry
}

type panelGeometry struct {
	Title   string
	Data    vg.Rectangle   // the data area
	Legends []vg.Rectangle // one per legend column
	Points  []vg.Point     // every mark
}

// Plot draws the report to path (.png or .svg). The client engine's
// report: on the left each mode's best throughput against the echo floors
// measured in the same run (log scale), on the right latency (p50 solid,
// p99 dashed, log scale) against throughput for every point run, one
// colour per mode: the thesis's Figures 4.16 and 4.17 for this machine.
// The wire engine's: per flow count each server's throughput and CPU
// time per request, one series per floor and per seqd mode.
func (r *Report) Plot(path string) error {
	if err := CheckPlotPath(path); err != nil {
		return err
	}
	b, _, err := r.render(strings.EqualFold(filepath.Ext(path), ".svg"))
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("loadgen: plot: %w", err)
	}
	return nil
}

// render draws the report as SVG or PNG and returns it with where its
// parts went.
func (r *Report) render(svg bool) ([]byte, geometry, error) {
	fig, err := r.figure()
	if err != nil {
		return nil, geometry{}, err
	}
	var c vg.CanvasWriterTo
	if svg {
		c = vgsvg.New(figW, figH)
	} else {
		c = vgimg.PngCanvas{Canvas: vgimg.NewWith(vgimg.UseWH(figW, figH), vgimg.UseDPI(110))}
	}
	geo := fig.draw(draw.New(c))
	var b bytes.Buffer
	if _, err := c.WriteTo(&b); err != nil {
		return nil, geometry{}, fmt.Errorf("loadgen: plot: %w", err)
	}
	return b.Bytes(), geo, nil
}

func (r *Report) figure() (*figure, error) {
	if len(r.Wire) > 0 {
		return r.wireFigure()
	}
	thr, err := r.throughputPanel()
	if err != nil {
		return nil, err
	}
	lat, err := r.latencyPanel()
	if err != nil {
		return nil, err
	}
	return &figure{heading: r.Params.heading(), panels: []*panel{thr, lat}}, nil
}

func textStyle(size vg.Length) text.Style {
	return text.Style{Font: font.From(plot.DefaultFont, size), Handler: plot.DefaultTextHandler}
}

// draw lays the figure out on dc: the heading on top, the panels side by
// side under it, each panel's legend in columns beneath its plot.
func (f *figure) draw(dc draw.Canvas) geometry {
	geo := geometry{Canvas: dc.Rectangle}
	const margin = 8
	hs := textStyle(headingFont)
	hs.XAlign = draw.XCenter
	hh := hs.Height(f.heading)
	top := dc.Max.Y - margin
	hw := hs.Width(f.heading)
	geo.Heading = vg.Rectangle{Min: vg.Point{X: dc.Center().X - hw/2, Y: top - hh}, Max: vg.Point{X: dc.Center().X + hw/2, Y: top}}
	dc.FillText(hs, vg.Point{X: dc.Center().X, Y: top - hh + hs.FontExtents().Descent}, f.heading)
	top -= hh + 6
	n := vg.Length(len(f.panels))
	const gap = 24
	pw := (dc.Max.X - dc.Min.X - 2*margin - gap*(n-1)) / n
	// One strip height for all, so that the panels' axes line up.
	var stripH vg.Length
	for _, pn := range f.panels {
		_, h := pn.legendColumns(pw)
		stripH = max(stripH, h)
	}
	for i, pn := range f.panels {
		x0 := dc.Min.X + margin + vg.Length(i)*(pw+gap)
		area := vg.Rectangle{Min: vg.Point{X: x0, Y: dc.Min.Y + margin}, Max: vg.Point{X: x0 + pw, Y: top}}
		geo.Panels = append(geo.Panels, pn.draw(dc, area, stripH))
	}
	return geo
}

// legendColumns splits the panel's legend into the fewest rows whose
// columns fit width, and returns the columns and the strip's height.
func (pn *panel) legendColumns(width vg.Length) ([][]legendEntry, vg.Length) {
	sty := textStyle(legendFont)
	var rowH vg.Length
	for _, e := range pn.legend {
		rowH = max(rowH, sty.Height(e.name))
	}
	for k := 1; k <= len(pn.legend); k++ {
		cs := slices.Collect(slices.Chunk(pn.legend, k))
		var w vg.Length
		for _, c := range cs {
			w += columnWidth(c) + legendPadCol
		}
		if w <= width || k == len(pn.legend) {
			return cs, vg.Length(k)*(rowH+legendPadRow) + 6
		}
	}
	return nil, 0
}

func columnWidth(c []legendEntry) vg.Length {
	sty := textStyle(legendFont)
	var w vg.Length
	for _, e := range c {
		w = max(w, legendThumb+sty.Width(" "+e.name))
	}
	return w
}

// draw draws the panel into area: its legend in columns along the bottom
// of a strip stripH high, its plot above.
func (pn *panel) draw(dc draw.Canvas, area vg.Rectangle, stripH vg.Length) panelGeometry {
	sty := textStyle(legendFont)
	cols, _ := pn.legendColumns(area.Max.X - area.Min.X)
	var rowH vg.Length
	for _, e := range pn.legend {
		rowH = max(rowH, sty.Height(e.name))
	}
	geo := panelGeometry{Title: pn.p.Title.Text}
	x := area.Min.X + 4
	for _, c := range cols {
		l := plot.NewLegend()
		l.Left, l.Top = true, true
		l.TextStyle = sty
		l.ThumbnailWidth = legendThumb
		l.Padding = legendPadRow
		cw := columnWidth(c)
		for _, e := range c {
			l.Add(e.name, e.thumbs...)
		}
		h := vg.Length(len(c))*(rowH+legendPadRow) - legendPadRow
		r := vg.Rectangle{Min: vg.Point{X: x, Y: area.Min.Y + stripH - 3 - h}, Max: vg.Point{X: x + cw, Y: area.Min.Y + stripH - 3}}
		l.Draw(draw.Canvas{Canvas: dc.Canvas, Rectangle: r})
		geo.Legends = append(geo.Legends, r)
		x += cw + legendPadCol
	}
	pc := draw.Canvas{Canvas: dc.Canvas, Rectangle: vg.Rectangle{Min: vg.Point{X: area.Min.X, Y: area.Min.Y + stripH}, Max: area.Max}}
	pn.p.Draw(pc)
	data := pn.p.DataCanvas(pc)
	geo.Data = data.Rectangle
	tx, ty := pn.p.Transforms(&data)
	for _, m := range pn.marks {
		geo.Points = append(geo.Points, vg.Point{X: tx(m.xy.X) + m.dx, Y: ty(m.xy.Y)})
	}
	return geo
}

// modeColor is a mode's colour in every plot: by its place in
// spec.ModeTable.
func modeColor(m string) color.Color {
	if i := slices.Index(spec.Modes, m); i >= 0 {
		return plotutil.Color(i)
	}
	return color.Black
}

// floorStyles are the echo floors' lines: the raw UDP echo, then the
// provider's.
var floorDashes = [][]vg.Length{{vg.Points(6), vg.Points(3)}, {vg.Points(2), vg.Points(2)}}

func floorColor(k int) color.Color { return color.Gray{Y: uint8(40 + 70*k)} }

// logRange is a log axis's range around [lo, hi] (both > 0), whole
// decades or a factor of two beyond, so that labels above points fit.
func logRange(lo, hi float64) (float64, float64) {
	return lo / 2, hi * 3
}

// throughputPanel: each mode's best throughput as a point on a log scale,
// with the echo floors as lines. The floors are tens of times the modes'
// throughput; on a linear scale the modes would sit at the bottom and
// could not be told apart, while on a log scale equal ratios are equal
// distances, so both a mode against another and a mode against the floor
// read by eye. Each point is labelled with its value and its share of
// the raw echo floor.
func (r *Report) throughputPanel() (*panel, error) {
	pn := &panel{p: plot.New()}
	p := pn.p
	// The log axes' units go in the title: gonum places a Y axis label
	// by the data midpoint, which on a log scale is near the top, and
	// shrinks the data area to fit it.
	p.Title.Text = "Best throughput per mode against the echo floors:\nmillion timestamps per second, log scale"
	p.X.Label.Text = "mode (its best point of -window/-clients)"
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	modes := r.modeOrder()
	lo, hi := math.Inf(1), 0.0
	for i, m := range modes {
		best := 0.0
		for _, x := range r.Results {
			if x.Mode == m {
				best = max(best, x.ThroughputOps/1e6)
			}
		}
		if best <= 0 {
			continue // nothing answered: no point on a log scale
		}
		lo, hi = min(lo, best), max(hi, best)
		sc, err := plotter.NewScatter(plotter.XYs{{X: float64(i), Y: best}})
		if err != nil {
			return nil, fmt.Errorf("loadgen: plot: %w", err)
		}
		sc.Color = modeColor(m)
		sc.Shape = draw.CircleGlyph{}
		sc.Radius = vg.Points(5)
		p.Add(sc)
		pn.mark(float64(i), best, 0)
		pn.add(m, sc)
		label := fmt.Sprintf("%.3g M/s", best)
		if r.EchoFloorOps > 0 {
			label += fmt.Sprintf("\n%.1f%% of raw echo", 100*best*1e6/r.EchoFloorOps)
		}
		l, err := plotter.NewLabels(plotter.XYLabels{XYs: plotter.XYs{{X: float64(i), Y: best}}, Labels: []string{label}})
		if err != nil {
			return nil, fmt.Errorf("loadgen: plot: %w", err)
		}
		l.TextStyle[0].XAlign = draw.XCenter
		l.Offset = vg.Point{Y: vg.Points(8)}
		p.Add(l)
	}
	p.NominalX(modes...)
	for k, fl := range []struct {
		name string
		v    float64
	}{
		{"raw UDP GSO/GRO echo (the echo floor)", r.Echo.RawUDP},
		{"provider header-only UD echo", r.Echo.Provider},
	} {
		if fl.v <= 0 {
			continue
		}
		v := fl.v / 1e6
		lo, hi = min(lo, v), max(hi, v)
		ln, err := plotter.NewLine(plotter.XYs{{X: -0.5, Y: v}, {X: float64(len(modes)) - 0.5, Y: v}})
		if err != nil {
			return nil, fmt.Errorf("loadgen: plot: %w", err)
		}
		ln.Color, ln.Dashes, ln.Width = floorColor(k), floorDashes[k], vg.Points(1.5)
		p.Add(ln)
		pn.mark(-0.5, v, 0)
		pn.mark(float64(len(modes))-0.5, v, 0)
		pn.add(fmt.Sprintf("%s: %.3g M/s", fl.name, v), ln)
	}
	if hi > 0 {
		p.Y.Min, p.Y.Max = logRange(lo, hi)
	}
	p.X.Min, p.X.Max = -0.6, float64(len(modes))-0.4
	p.Add(plotter.NewGrid())
	return pn, nil
}

// latencyPanel: latency (p50 solid, p99 dashed) against throughput for
// every point run, one colour per mode, both axes on a log scale when
// the throughputs span more than a factor of ten (so that a slow mode's
// points are not squeezed against the axis). Each point is labelled
// clients×window.
func (r *Report) latencyPanel() (*panel, error) {
	pn := &panel{p: plot.New()}
	p := pn.p
	p.Title.Text = "Latency (µs, log scale) against throughput (million timestamps per second),\nevery point, labelled clients×window"
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	lo, hi, left, right := math.Inf(1), 0.0, math.Inf(1), 0.0
	for _, x := range r.Results {
		if x.P50us > 0 && x.ThroughputOps > 0 {
			left, right = min(left, x.ThroughputOps/1e6), max(right, x.ThroughputOps/1e6)
		}
	}
	logX := right > 0 && right/left > 10
	if logX {
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = plot.LogTicks{Prec: -1}
		p.Title.Text = strings.Replace(p.Title.Text, "second)", "second, log scale)", 1)
	}
	for mi, m := range r.modeOrder() {
		var pts []Result
		for _, x := range r.Results {
			if x.Mode == m && x.P50us > 0 && x.ThroughputOps > 0 {
				pts = append(pts, x)
			}
		}
		if len(pts) == 0 {
			continue
		}
		slices.SortFunc(pts, func(a, b Result) int {
			if a.ThroughputOps < b.ThroughputOps {
				return -1
			}
			return 1
		})
		var thumbs []plot.Thumbnailer
		for q, get := range []func(Result) float64{
			func(x Result) float64 { return x.P50us },
			func(x Result) float64 { return x.P99us },
		} {
			xys := make(plotter.XYs, len(pts))
			for j, x := range pts {
				xys[j] = plotter.XY{X: x.ThroughputOps / 1e6, Y: max(get(x), 0.1)}
				lo, hi = min(lo, xys[j].Y), max(hi, xys[j].Y)
				pn.mark(xys[j].X, xys[j].Y, 0)
			}
			ln, sc, err := plotter.NewLinePoints(xys)
			if err != nil {
				return nil, fmt.Errorf("loadgen: plot: %w", err)
			}
			ln.Color, sc.Color = modeColor(m), modeColor(m)
			ln.Width = vg.Points(1.5)
			sc.Shape = draw.CircleGlyph{}
			if q == 1 {
				ln.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
				sc.Shape = draw.TriangleGlyph{}
			} else {
				thumbs = []plot.Thumbnailer{ln, sc}
			}
			p.Add(ln, sc)
		}
		pn.add(m, thumbs...)
		var lx plotter.XYLabels
		for _, x := range pts {
			lx.XYs = append(lx.XYs, plotter.XY{X: x.ThroughputOps / 1e6, Y: max(x.P50us, 0.1)})
			lx.Labels = append(lx.Labels, fmt.Sprintf("%d×%d", x.Clients, x.Window))
		}
		l, err := plotter.NewLabels(lx)
		if err != nil {
			return nil, fmt.Errorf("loadgen: plot: %w", err)
		}
		// Below the points, every other mode's above, so that two
		// modes' labels at the same throughput do not print over each
		// other.
		l.Offset = vg.Point{X: vg.Points(4), Y: -vg.Points(12)}
		if mi%2 == 1 {
			l.Offset.Y = vg.Points(5)
		}
		p.Add(l)
	}
	// What the line styles mean, in black.
	for q, name := range []string{"p50 (solid, circles)", "p99 (dashed, triangles)"} {
		ln, sc, err := plotter.NewLinePoints(plotter.XYs{{X: 1, Y: 1}})
		if err != nil {
			return nil, fmt.Errorf("loadgen: plot: %w", err)
		}
		ln.Width = vg.Points(1.5)
		sc.Shape = draw.CircleGlyph{}
		if q == 1 {
			ln.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
			sc.Shape = draw.TriangleGlyph{}
		}
		pn.add(name, ln, sc)
	}
	if hi > 0 {
		p.Y.Min, p.Y.Max = logRange(lo, hi)
		p.X.Min, p.X.Max = 0, right*1.15
		if logX {
			p.X.Min, p.X.Max = left/1.5, right*1.5
		}
	}
	p.Add(plotter.NewGrid())
	return pn, nil
}

// wireFloors are the wire engine's floor servers, in the order drawn.
var wireFloors = []string{"provider-echo", "raw-echo"}

// wireServers are the wire engine's servers: the floors and seqd.
var wireServers = append(slices.Clone(wireFloors), "seqd")

// wireSeries is one bar series of the wire plots: a floor server, or seqd
// in one mode.
type wireSeries struct {
	name, server, mode string
	color              color.Color
}

func (s wireSeries) has(x WireResult) bool {
	return x.Server == s.server && (s.mode == "" || x.Mode == s.mode || (x.Mode == "" && s.mode == spec.ModeSpecS0))
}

// wireFigure draws the wire engine's results: per flow count each
// server's throughput (one bar series per floor and per seqd mode, Redis
// INCR and the modes run through the client library as lines across), and
// each server's CPU time per request, user and kernel.
func (r *Report) wireFigure() (*figure, error) {
	var flows []int
	window := map[int]int{}
	var series []wireSeries
	for _, x := range r.Wire {
		if !slices.Contains(flows, x.Flows) {
			flows = append(flows, x.Flows)
		}
		if x.Window > 0 {
			window[x.Flows] = x.Window
		}
	}
	for k, s := range wireFloors {
		for _, x := range r.Wire {
			if x.Server == s {
				series = append(series, wireSeries{name: s, server: s, color: floorColor(k)})
				break
			}
		}
	}
	for _, x := range r.Wire {
		if x.Server != "seqd" {
			continue
		}
		m := x.Mode
		if m == "" {
			m = spec.ModeSpecS0
		}
		if !slices.ContainsFunc(series, func(s wireSeries) bool { return s.mode == m }) {
			series = append(series, wireSeries{name: "seqd " + m, server: "seqd", mode: m, color: modeColor(m)})
		}
	}
	names := make([]string, len(flows))
	for i, f := range flows {
		names[i] = fmt.Sprintf("%d flow", f)
		if f != 1 {
			names[i] += "s"
		}
		if w := window[f]; w > 0 {
			names[i] += fmt.Sprintf(" × %d", w)
		}
	}
	thr, cpu := &panel{p: plot.New()}, &panel{p: plot.New()}
	thr.p.Title.Text = "Throughput per flow count, each server on the same core"
	thr.p.Y.Label.Text = "requests per second (millions)"
	cpu.p.Title.Text = "Server CPU time per request (user + kernel)"
	cpu.p.Y.Label.Text = "ns per request"
	for _, pn := range []*panel{thr, cpu} {
		pn.p.NominalX(names...)
		pn.p.X.Label.Text = "flows (emulated client QPs) × window per flow"
		pn.p.Add(plotter.NewGrid())
	}
	// Bars side by side within a category: as wide as fits 80% of it
	// on a panel about half the figure wide, at most 16 points.
	perCat := (figW/2 - 3*vg.Centimeter) / vg.Length(max(len(flows), 1))
	bw := min(vg.Points(16), 0.8*perCat/vg.Length(max(len(series), 1)))
	topM, topN := 0.0, 0.0
	for k, s := range series {
		mops := make(plotter.Values, len(flows))
		ns := make(plotter.Values, len(flows))
		for i, f := range flows {
			for _, x := range r.Wire {
				if x.Flows == f && s.has(x) {
					mops[i], ns[i] = x.Mops, x.UserNsPerReq+x.SysNsPerReq
				}
			}
			topM, topN = max(topM, mops[i]), max(topN, ns[i])
		}
		off := bw * (vg.Length(k) - vg.Length(len(series)-1)/2)
		for j, pn := range []*panel{thr, cpu} {
			vals := mops
			if j == 1 {
				vals = ns
			}
			b, err := plotter.NewBarChart(vals, bw)
			if err != nil {
				return nil, fmt.Errorf("loadgen: plot: %w", err)
			}
			b.Offset = off
			b.Color = s.color
			b.LineStyle.Width = 0
			pn.p.Add(b)
			pn.add(s.name, b)
			for i, v := range vals {
				pn.mark(float64(i), v, off)
			}
		}
	}
	across := func(pn *panel, v float64, name string, c color.Color, dash []vg.Length) error {
		ln, err := plotter.NewLine(plotter.XYs{{X: -0.5, Y: v}, {X: float64(len(flows)) - 0.5, Y: v}})
		if err != nil {
			return fmt.Errorf("loadgen: plot: %w", err)
		}
		ln.Color, ln.Dashes, ln.Width = c, dash, vg.Points(1.5)
		pn.p.Add(ln)
		pn.mark(-0.5, v, 0)
		pn.mark(float64(len(flows))-0.5, v, 0)
		pn.add(name, ln)
		return nil
	}
	dash := []vg.Length{vg.Points(6), vg.Points(3)}
	if x := r.Redis; x != nil && x.Ops > 0 {
		name := fmt.Sprintf("redis INCR -c %d -P %d", x.Conns, x.Pipeline)
		if err := across(thr, x.Ops/1e6, name, color.Black, dash); err != nil {
			return nil, err
		}
		topM = max(topM, x.Ops/1e6)
		if ns := x.UserNsPerReq + x.SysNsPerReq; ns > 0 {
			if err := across(cpu, ns, name, color.Black, dash); err != nil {
				return nil, err
			}
			topN = max(topN, ns)
		}
	}
	// Modes the wire generator does not speak, run through the client
	// library: one value each, not per flow count.
	for _, m := range r.modeOrder() {
		best := Result{}
		for _, x := range r.Results {
			if x.Mode == m && x.ThroughputOps > best.ThroughputOps {
				best = x
			}
		}
		if best.ThroughputOps <= 0 {
			continue
		}
		v := best.ThroughputOps / 1e6
		name := fmt.Sprintf("seqd %s, client library (%d×%d)", m, best.Clients, best.Window)
		if err := across(thr, v, name, modeColor(m), []vg.Length{vg.Points(2), vg.Points(2)}); err != nil {
			return nil, err
		}
		topM = max(topM, v)
	}
	thr.p.Y.Min, thr.p.Y.Max, cpu.p.Y.Min, cpu.p.Y.Max = 0, topM*1.1+0.01, 0, topN*1.1+1
	for _, pn := range []*panel{thr, cpu} {
		pn.p.X.Min, pn.p.X.Max = -0.6, float64(len(flows))-0.4
	}
	return &figure{heading: r.Params.heading(), panels: []*panel{thr, cpu}}, nil
}
