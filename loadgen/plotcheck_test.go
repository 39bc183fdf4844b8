package loadgen

import (
	"html"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"gonum.org/v1/plot/vg"

	"github.com/seqd/seqd/spec"
)

// sweepReport is a client-engine sweep over every mode, each at 1% to 8%
// of the echo floor, as on a shared 2-core machine.
func sweepReport() *Report {
	r := &Report{EchoFloorOps: 9e6, Echo: Echo{RawUDP: 9e6, Provider: 4.5e6},
		Params: Params{Engine: EngineClient, Duration: "5s", Warmup: "1s", Provider: "soft", ServerCore: -1,
			Clients: []int{1}, Windows: []int{1, 4, 16, 64}}}
	for k, m := range spec.Modes {
		share := 0.08 * math.Pow(1.0/8, float64(k)/float64(len(spec.Modes)-1)) // 8% of the floor down to 1%
		for i, w := range []int{1, 4, 16, 64} {
			r.Results = append(r.Results, Result{Mode: m, Clients: 1, Window: w,
				ThroughputOps: share * 9e6 * float64(1+i) / 4, P50us: float64(20 + 15*i*i), P99us: float64(60 + 90*i*i)})
		}
	}
	return r
}

// wireReport is an -engine wire run of spec-s0 and herd (with the floors
// and Redis) and fasst through the client library.
func wireReport() *Report {
	r := &Report{Redis: &RedisResult{Ops: 1.02e6, Conns: 50, Pipeline: 64, UserNsPerReq: 667, SysNsPerReq: 98},
		Params: Params{Engine: EngineWire, Duration: "1s", Warmup: "200ms", Slices: 1, InFlight: 256, ServerCore: 1, Provider: "soft",
			Clients: []int{1}, Windows: []int{64}}}
	for _, facts := range spec.ModeTable {
		if !facts.Wire {
			continue
		}
		mode := facts.Name
		for i, f := range []int{1, 64, 1024} {
			w := 256 / f
			if w == 0 {
				w = 1
			}
			if mode == spec.ModeSpecS0 {
				r.Wire = append(r.Wire,
					WireResult{Server: "provider-echo", Flows: f, Window: w, Mops: 3.6 / float64(i+1), UserNsPerReq: 150, SysNsPerReq: 90},
					WireResult{Server: "raw-echo", Flows: f, Window: w, Mops: 3.5 / float64(i+1), UserNsPerReq: 60, SysNsPerReq: 130})
			}
			r.Wire = append(r.Wire, WireResult{Server: "seqd", Mode: mode, Flows: f, Window: w, Mops: 0.5 + float64(i)/4, UserNsPerReq: 600, SysNsPerReq: 400})
		}
	}
	r.Results = append(r.Results, Result{Mode: spec.ModeFaSST, Clients: 1, Window: 64, ThroughputOps: 0.243e6, P50us: 220, P99us: 1425})
	return r
}

// svgText is one <text> of an SVG drawn by gonum: its content, baseline
// start in canvas coordinates (points, origin bottom left) and font size;
// rotated (the Y axis label) is set for text in a rotated group.
type svgText struct {
	s       string
	x, y    float64
	size    float64
	rotated bool
}

var (
	svgViewBox = regexp.MustCompile(`viewBox="0 0 ([0-9.]+) ([0-9.]+)"`)
	svgTextRE  = regexp.MustCompile(`(?s)(<g transform="rotate\(90\)">\s*)?<text x="([-0-9.e]+)" y="([-0-9.e]+)" transform="scale\(1, -1\)"\s*style="[^"]*font-size:([0-9.]+)px[^"]*">([^<]*)</text>`)
)

// parseSVG returns the canvas size and every text of an SVG from Plot.
func parseSVG(t *testing.T, b []byte) (w, h float64, texts []svgText) {
	t.Helper()
	m := svgViewBox.FindSubmatch(b)
	if m == nil {
		t.Fatalf("no viewBox in the SVG")
	}
	w, _ = strconv.ParseFloat(string(m[1]), 64)
	h, _ = strconv.ParseFloat(string(m[2]), 64)
	for _, m := range svgTextRE.FindAllSubmatch(b, -1) {
		x, _ := strconv.ParseFloat(string(m[2]), 64)
		y, _ := strconv.ParseFloat(string(m[3]), 64)
		size, _ := strconv.ParseFloat(string(m[4]), 64)
		// The text is drawn at (x, y) flipped: its baseline is at -y.
		texts = append(texts, svgText{s: html.UnescapeString(string(m[5])), x: x, y: -y, size: size, rotated: len(m[1]) > 0})
	}
	if len(texts) == 0 {
		t.Fatalf("no text in the SVG")
	}
	return w, h, texts
}

// plotSVG draws r with Plot to an SVG file and returns the file.
func plotSVG(t *testing.T, r *Report, name string) []byte {
	t.Helper()
	dir := t.TempDir()
	if p := os.Getenv("LOADGEN_TEST_PLOT_SAMPLE"); p != "" {
		dir = p // keep the files to look at
	}
	path := filepath.Join(dir, name)
	if err := r.Plot(path); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Plot(strings.TrimSuffix(path, ".svg") + ".png"); err != nil {
		t.Fatal(err)
	}
	return b
}

func count(texts []svgText, s string) int {
	n := 0
	for _, x := range texts {
		if x.s == s {
			n++
		}
	}
	return n
}

func hasPrefix(texts []svgText, s string) bool {
	for _, x := range texts {
		if strings.HasPrefix(x.s, s) {
			return true
		}
	}
	return false
}

// TestPlotSeriesAndLabels renders each kind of plot as SVG and checks
// its series (one legend entry per mode, in every panel that draws it),
// axis labels, and the run's parameters in the heading; and that every
// text lies inside the canvas.
func TestPlotSeriesAndLabels(t *testing.T) {
	for _, tc := range []struct {
		name    string
		r       *Report
		series  map[string]int // legend text: how many times it is drawn
		labels  []string       // axis labels and ticks, exactly
		heading []string       // in the heading
		never   []string
	}{
		{"wire", wireReport(),
			map[string]int{"provider-echo": 2, "raw-echo": 2, "seqd spec-s0": 2, "seqd herd": 2, "redis INCR -c 50 -P 64": 2,
				"seqd fasst, client library (1×64)": 1},
			[]string{"1 flow × 256", "64 flows × 4", "1024 flows × 1", "flows (emulated client QPs) × window per flow",
				"requests per second (millions)", "ns per request"},
			[]string{"-engine wire", "1s measured after 200ms warm-up", "at most 256 requests in flight", "servers on core 1"},
			[]string{"seqd", "1 flows"}},
		{"sweep", sweepReport(),
			// A mode's name: both legends and the throughput panel's axis.
			everyMode(3, map[string]int{"p50 (solid, circles)": 1, "p99 (dashed, triangles)": 1}),
			[]string{"million timestamps per second, log scale", "every point, labelled clients×window", "1×64", "1×1"},
			[]string{"-engine client", "5s measured after 1s warm-up", "clients 1, window 1,4,16,64"},
			[]string{"spec-s0 p50"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, h, texts := parseSVG(t, plotSVG(t, tc.r, tc.name+".svg"))
			for name, n := range tc.series {
				if got := count(texts, name); got != n {
					t.Errorf("legend entry %q drawn %d times, want %d", name, got, n)
				}
			}
			for _, l := range tc.labels {
				if count(texts, l) == 0 {
					t.Errorf("no text %q", l)
				}
			}
			if tc.name == "sweep" && !hasPrefix(texts, "Latency (µs, log scale) against throughput (million timestamps per second, log scale)") {
				t.Errorf("no latency title with its units")
			}
			for _, s := range tc.never {
				if count(texts, s) > 0 {
					t.Errorf("text %q drawn", s)
				}
			}
			heading := texts[0].s
			for _, x := range texts {
				if strings.HasPrefix(x.s, "loadgen -engine") {
					heading = x.s
				}
			}
			for _, p := range tc.heading {
				if !strings.Contains(heading, p) {
					t.Errorf("heading %q lacks %q", heading, p)
				}
			}
			// Every text inside the canvas (its width as the font
			// measures it).
			for _, x := range texts {
				if x.rotated {
					continue
				}
				tw := float64(textStyle(vg.Length(x.size)).Width(x.s))
				if x.x < 0 || x.x+tw > w+0.5 || x.y < 0 || x.y+x.size > h+0.5 {
					t.Errorf("text %q at (%.1f, %.1f), %.1f wide, leaves the %.0f×%.0f canvas", x.s, x.x, x.y, tw, w, h)
				}
			}
		})
	}
}

// TestPlotLegendPlacement: each legend lies inside the canvas, outside
// every data area, and over no point drawn; the legend texts in the SVG
// are where the layout put the legends; and in the mode plot every mode's
// point sits well above the bottom of its panel (modes at 1% to 8% of the
// echo floor can be compared by eye).
func TestPlotLegendPlacement(t *testing.T) {
	for name, r := range map[string]*Report{"wire": wireReport(), "sweep": sweepReport()} {
		t.Run(name, func(t *testing.T) {
			b, geo, err := r.render(true)
			if err != nil {
				t.Fatal(err)
			}
			_, _, texts := parseSVG(t, b)
			inside := func(p vg.Point, r vg.Rectangle) bool {
				return p.X >= r.Min.X && p.X <= r.Max.X && p.Y >= r.Min.Y && p.Y <= r.Max.Y
			}
			overlap := func(a, b vg.Rectangle) bool {
				return a.Min.X < b.Max.X && b.Min.X < a.Max.X && a.Min.Y < b.Max.Y && b.Min.Y < a.Max.Y
			}
			if !inside(geo.Heading.Min, geo.Canvas) || !inside(geo.Heading.Max, geo.Canvas) {
				t.Errorf("heading %v leaves the canvas %v", geo.Heading, geo.Canvas)
			}
			var legends []vg.Rectangle
			for _, pg := range geo.Panels {
				if len(pg.Legends) == 0 || len(pg.Points) == 0 {
					t.Fatalf("panel %q: %d legend columns, %d points", pg.Title, len(pg.Legends), len(pg.Points))
				}
				for _, l := range pg.Legends {
					legends = append(legends, l)
					if !inside(l.Min, geo.Canvas) || !inside(l.Max, geo.Canvas) {
						t.Errorf("panel %q: legend %v leaves the canvas %v", pg.Title, l, geo.Canvas)
					}
				}
			}
			for _, pg := range geo.Panels {
				for _, l := range legends {
					if overlap(l, pg.Data) {
						t.Errorf("legend %v overlaps the data area %v of %q", l, pg.Data, pg.Title)
					}
					for _, p := range pg.Points {
						if inside(p, l) {
							t.Errorf("legend %v covers a point %v of %q", l, p, pg.Title)
						}
					}
				}
			}
			// The SVG agrees: each legend entry's text is drawn inside a
			// legend, and none inside a data area.
			at := func(x svgText) vg.Point { return vg.Point{X: vg.Length(x.x), Y: vg.Length(x.y)} }
			for _, e := range legendNames(r) {
				in := false
				for _, x := range texts {
					if x.s != e || x.rotated {
						continue
					}
					for _, l := range legends {
						// The text starts a space after its thumbnail; its
						// baseline sits above the descent, in the box.
						in = in || inside(at(x), l)
					}
					for _, pg := range geo.Panels {
						if inside(at(x), pg.Data) {
							t.Errorf("legend text %q at %v is inside the data area of %q", e, at(x), pg.Title)
						}
					}
				}
				if !in {
					t.Errorf("legend text %q is in no legend %v", e, legends)
				}
			}
			if name != "sweep" {
				return
			}
			// The modes, from 1% to 8% of the floor, spread over a good
			// part of the panel's height, not squeezed at its bottom.
			thr := geo.Panels[0]
			lo, hi := thr.Data.Max.Y, thr.Data.Min.Y
			for _, p := range thr.Points[:len(r.modeOrder())] {
				lo, hi = min(lo, p.Y), max(hi, p.Y)
			}
			if spread := (hi - lo) / (thr.Data.Max.Y - thr.Data.Min.Y); spread < 0.3 {
				t.Errorf("the modes' points span %.0f%% of the panel's height: too little to compare them", 100*spread)
			}
		})
	}
}

// legendNames are the legend entries of r's figure.
func legendNames(r *Report) []string {
	fig, err := r.figure()
	if err != nil {
		return nil
	}
	var ns []string
	for _, pn := range fig.panels {
		for _, e := range pn.legend {
			ns = append(ns, e.name)
		}
	}
	return ns
}

// everyMode returns m with each mode's name drawn n times.
func everyMode(n int, m map[string]int) map[string]int {
	for _, mode := range spec.Modes {
		m[mode] = n
	}
	return m
}
