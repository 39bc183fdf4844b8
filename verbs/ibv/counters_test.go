package ibv

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/seqd/seqd/verbs"
)

func TestVisitSysfsCounters(t *testing.T) {
	root := t.TempDir()
	write := func(dir, name, value string) {
		p := filepath.Join(root, "mlx5_0", "ports", "1", dir)
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(p, name), []byte(value), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("counters", "port_rcv_packets", "12\n")
	write("counters", "port_xmit_packets", "34\n")
	write("counters", "garbage", "n/a\n")
	write("hw_counters", "out_of_buffer", "5\n")
	write("hw_counters", "out_of_sequence", "6\n")
	write("hw_counters", "rnr_nak_retry_err", "7\n")

	got := map[string]uint64{}
	visitSysfsCounters(root, "mlx5_0", 1, func(name string, v uint64) { got[name] = v })
	want := map[string]uint64{
		"port_rcv_packets": 12, verbs.CounterRxPackets: 12,
		"port_xmit_packets": 34, verbs.CounterTxPackets: 34,
		"out_of_buffer": 5, verbs.CounterDropNoRecv: 5,
		"out_of_sequence": 6, verbs.CounterDropPSN: 6,
		"rnr_nak_retry_err": 7,
	}
	if len(got) != len(want) {
		t.Errorf("got %d counters %v, want %d", len(got), got, len(want))
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("counter %s = %d, want %d", k, got[k], v)
		}
	}

	n := 0
	visitSysfsCounters(root, "mlx5_0", 2, func(string, uint64) { n++ })
	visitSysfsCounters(filepath.Join(root, "missing"), "x", 1, func(string, uint64) { n++ })
	if n != 0 {
		t.Errorf("missing directories gave %d counters", n)
	}
}
