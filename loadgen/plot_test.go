package loadgen

import (
	"os"
	"path/filepath"
	"testing"
)

func sampleReport() *Report {
	r := &Report{EchoFloorOps: 9e6, Echo: Echo{RawUDP: 9e6, Provider: 4.5e6}}
	for _, m := range []struct {
		name  string
		scale float64
	}{{"spec-s0", 1}, {"herd", 0.7}, {"atomics", 0.1}} {
		for i, w := range []int{1, 4, 16, 64} {
			r.Results = append(r.Results, Result{Mode: m.name, Clients: 1, Window: w,
				ThroughputOps: m.scale * float64(1+i*i) * 3e5, P50us: float64(20 + 15*i*i), P99us: float64(60 + 90*i*i)})
		}
	}
	return r
}

func TestPlot(t *testing.T) {
	dir := t.TempDir()
	if p := os.Getenv("LOADGEN_TEST_PLOT_SAMPLE"); p != "" {
		dir = p // keep the files to look at
	}
	for _, name := range []string{"out.png", "out.svg"} {
		path := filepath.Join(dir, name)
		if err := sampleReport().Plot(path); err != nil {
			t.Fatal(err)
		}
		if st, err := os.Stat(path); err != nil || st.Size() < 1000 {
			t.Fatalf("%s: %v %v", name, st, err)
		}
	}
	if err := sampleReport().Plot(filepath.Join(dir, "out.jpg")); err == nil {
		t.Fatal("a .jpg plot was accepted")
	}
}

func TestPlotWire(t *testing.T) {
	r := &Report{Redis: &RedisResult{Ops: 1.5e6, Conns: 50, Pipeline: 64}}
	for _, f := range []int{1, 64, 1024} {
		for i, s := range wireServers {
			r.Wire = append(r.Wire, WireResult{Server: s, Mode: "spec-s0", Flows: f, Mops: float64(i + 1), UserNsPerReq: 100, SysNsPerReq: 200})
		}
	}
	path := filepath.Join(t.TempDir(), "wire.png")
	if p := os.Getenv("WIRE_PLOT"); p != "" {
		path = p
	}
	if err := r.Plot(path); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(path); err != nil || st.Size() < 1000 {
		t.Fatalf("plot: %v %v", st, err)
	}
}
