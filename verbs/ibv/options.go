package ibv

import (
	"fmt"
	"net/netip"
	"strconv"

	"github.com/seqd/seqd/verbs"
)

// config is the validated form of the provider options.
type config struct {
	port     uint8 // physical port, 1-based
	gidIndex int   // -1: choose one (see pickGID)
}

// parseOptions validates the provider options and fills in defaults. Keys:
//
//	port=N       physical port of the device (default 1)
//	gid_index=N  source GID table index (default: the first RoCE v2
//	             IPv4-mapped GID of the port, else 0)
func parseOptions(opts verbs.Options) (config, error) {
	c := config{port: 1, gidIndex: -1}
	for k, v := range opts {
		switch k {
		case "port":
			n, err := strconv.ParseUint(v, 10, 8)
			if err != nil || n == 0 {
				return c, fmt.Errorf("%w: ibv option port=%q: want 1..255", verbs.ErrInvalidArgument, v)
			}
			c.port = uint8(n)
		case "gid_index":
			n, err := strconv.ParseUint(v, 10, 8)
			if err != nil {
				return c, fmt.Errorf("%w: ibv option gid_index=%q: want 0..255", verbs.ErrInvalidArgument, v)
			}
			c.gidIndex = int(n)
		default:
			return c, fmt.Errorf("%w: unknown ibv option %q (have port, gid_index)", verbs.ErrInvalidArgument, k)
		}
	}
	return c, nil
}

// GID types, as enum ibv_gid_type.
const (
	gidTypeIB = iota
	gidTypeRoCEv1
	gidTypeRoCEv2
)

// gidEntry is one valid entry of a port's GID table.
type gidEntry struct {
	GID   verbs.GID
	Index int
	Port  int
	Type  int
}

// pickGID returns the GID index to use on port when the user chose none:
// the lowest-indexed RoCE v2 entry whose GID is IPv4-mapped (what peers
// reach over IPv4 UDP port 4791), else 0.
func pickGID(entries []gidEntry, port int) int {
	best := -1
	for _, e := range entries {
		if e.Port != port || e.Type != gidTypeRoCEv2 {
			continue
		}
		if !netip.AddrFrom16(e.GID).Is4In6() {
			continue
		}
		if best < 0 || e.Index < best {
			best = e.Index
		}
	}
	if best < 0 {
		return 0
	}
	return best
}
