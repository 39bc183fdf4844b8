package ibv

import (
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/seqd/seqd/verbs"
)

// sysfsRoot is where the kernel publishes RDMA devices.
const sysfsRoot = "/sys/class/infiniband"

// counterAliases gives the sysfs counters that mean one of verbs' common
// counters their common name too. The raw names are always visited as
// well. (mlx5 names; other drivers simply lack them.)
var counterAliases = map[string]string{
	"port_rcv_packets":  verbs.CounterRxPackets,
	"port_xmit_packets": verbs.CounterTxPackets,
	"out_of_buffer":     verbs.CounterDropNoRecv,
	"out_of_sequence":   verbs.CounterDropPSN,
	"duplicate_request": verbs.CounterRCDuplicates,
}

// visitSysfsCounters calls f for every counter of a device port found under
// root/<dev>/ports/<port>/{counters,hw_counters}, best effort: missing
// directories and unreadable files are skipped. Values are raw (IB
// port_*_data counters count 4-byte words).
func visitSysfsCounters(root, dev string, port uint8, f func(name string, value uint64)) {
	base := filepath.Join(root, dev, "ports", strconv.Itoa(int(port)))
	for _, dir := range []string{"counters", "hw_counters"} {
		ents, err := os.ReadDir(filepath.Join(base, dir))
		if err != nil {
			continue
		}
		names := make([]string, 0, len(ents))
		for _, e := range ents {
			if !e.IsDir() {
				names = append(names, e.Name())
			}
		}
		sort.Strings(names)
		for _, n := range names {
			b, err := os.ReadFile(filepath.Join(base, dir, n))
			if err != nil {
				continue
			}
			v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
			if err != nil {
				continue
			}
			f(n, v)
			if alias, ok := counterAliases[n]; ok {
				f(alias, v)
			}
		}
	}
}
