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
	gidIPv6  bool  // the family pickGID looks for: IPv6 instead of IPv4
	// tclass is the traffic class of every address handle and connected
	// QP path whose attributes leave it 0: the IPv4 DSCP and ECN bits
	// (the TOS byte) on RoCE v2. -1: 0.
	tclass int
	// atomicOrder overrides the atomic byte order read from the device:
	// "" (from atomic_cap), "host" or "be".
	atomicOrder string
}

// parseOptions validates the provider options and fills in defaults. Keys:
//
//	port=N          physical port of the device (default 1)
//	gid_index=N     source GID table index (default: the port's first
//	                RoCE v2 GID of gid_family; opening fails if there is
//	                none)
//	gid_family=F    ipv4 (default) or ipv6: the GID pickGID looks for
//	tclass=N        traffic class (IPv4 TOS: DSCP<<2 | ECN) for address
//	                handles and paths that leave it 0 (default 0)
//	atomic_order=O  host or be: the byte order of atomics in memory,
//	                overriding what atomic_cap says (see atomicBigEndian)
func parseOptions(opts verbs.Options) (config, error) {
	c := config{port: 1, gidIndex: -1, tclass: -1}
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
		case "gid_family":
			switch v {
			case "ipv4":
				c.gidIPv6 = false
			case "ipv6":
				c.gidIPv6 = true
			default:
				return c, fmt.Errorf("%w: ibv option gid_family=%q: want ipv4 or ipv6", verbs.ErrInvalidArgument, v)
			}
		case "tclass":
			n, err := strconv.ParseUint(v, 10, 8)
			if err != nil {
				return c, fmt.Errorf("%w: ibv option tclass=%q: want 0..255", verbs.ErrInvalidArgument, v)
			}
			c.tclass = int(n)
		case "atomic_order":
			if v != "host" && v != "be" {
				return c, fmt.Errorf("%w: ibv option atomic_order=%q: want host or be", verbs.ErrInvalidArgument, v)
			}
			c.atomicOrder = v
		default:
			return c, fmt.Errorf("%w: unknown ibv option %q (have port, gid_index, gid_family, tclass, atomic_order)", verbs.ErrInvalidArgument, k)
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
// the lowest-indexed RoCE v2 entry whose GID is of the wanted family
// (IPv4-mapped, what peers reach over IPv4 UDP port 4791, or IPv6). There
// is no fallback: index 0 is usually RoCE v1 on mlx5, which is not UDP,
// so a port without such a GID (or a kernel that cannot list GID types)
// is an error that says to set gid_index.
func pickGID(entries []gidEntry, port int, ipv6 bool) (int, error) {
	best := -1
	for _, e := range entries {
		if e.Port != port || e.Type != gidTypeRoCEv2 {
			continue
		}
		if a := netip.AddrFrom16(e.GID); a.Is4In6() == ipv6 || a.IsUnspecified() {
			continue
		}
		if best < 0 || e.Index < best {
			best = e.Index
		}
	}
	if best < 0 {
		fam := "IPv4"
		if ipv6 {
			fam = "IPv6"
		}
		return 0, fmt.Errorf("%w: port %d has no RoCE v2 GID with an %s address (of %d GID table entries read); "+
			"give the interface an address, or choose one with gid_index=N", verbs.ErrNoDevice, port, fam, len(entries))
	}
	return best, nil
}

// Atomic capabilities, as enum ibv_atomic_cap.
const (
	atomicNone = iota
	atomicHCA
	atomicGlob
)

// atomicBigEndian returns the byte order in which the responder's atomics
// read and write memory. The verbs API has no byte-order attribute:
// mlx5's kernel driver reports IB_ATOMIC_HCA only when the device runs
// atomics in host endianness (atomic_req_8B_endianness_mode) and
// IB_ATOMIC_NONE otherwise, so a device that advertises atomics uses the
// host's order. override ("host" or "be", the atomic_order option) is for
// hardware that does otherwise. ok is false when the device has no
// atomics and nothing overrides.
func atomicBigEndian(atomicCap int, hostBigEndian bool, override string) (be, ok bool) {
	switch override {
	case "be":
		return true, true
	case "host":
		return hostBigEndian, true
	}
	if atomicCap == atomicNone {
		return false, false
	}
	return hostBigEndian, true
}
