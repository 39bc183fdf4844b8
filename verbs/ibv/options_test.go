package ibv

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/seqd/seqd/verbs"
)

func TestParseOptions(t *testing.T) {
	tests := []struct {
		name string
		opts verbs.Options
		want config
		err  error
	}{
		{"Defaults", nil, config{port: 1, gidIndex: -1, tclass: -1}, nil},
		{"Port", verbs.Options{"port": "2"}, config{port: 2, gidIndex: -1, tclass: -1}, nil},
		{"GIDIndex", verbs.Options{"gid_index": "3"}, config{port: 1, gidIndex: 3, tclass: -1}, nil},
		{"GIDIndexZero", verbs.Options{"gid_index": "0"}, config{port: 1, gidIndex: 0, tclass: -1}, nil},
		{"GIDFamily", verbs.Options{"gid_family": "ipv6"}, config{port: 1, gidIndex: -1, gidIPv6: true, tclass: -1}, nil},
		{"GIDFamilyBad", verbs.Options{"gid_family": "v4"}, config{}, verbs.ErrInvalidArgument},
		{"TClass", verbs.Options{"tclass": "106"}, config{port: 1, gidIndex: -1, tclass: 106}, nil},
		{"TClassBig", verbs.Options{"tclass": "256"}, config{}, verbs.ErrInvalidArgument},
		{"AtomicOrder", verbs.Options{"atomic_order": "be"}, config{port: 1, gidIndex: -1, tclass: -1, atomicOrder: "be"}, nil},
		{"AtomicOrderBad", verbs.Options{"atomic_order": "little"}, config{}, verbs.ErrInvalidArgument},
		{"PortZero", verbs.Options{"port": "0"}, config{}, verbs.ErrInvalidArgument},
		{"PortBig", verbs.Options{"port": "256"}, config{}, verbs.ErrInvalidArgument},
		{"PortText", verbs.Options{"port": "one"}, config{}, verbs.ErrInvalidArgument},
		{"GIDNegative", verbs.Options{"gid_index": "-1"}, config{}, verbs.ErrInvalidArgument},
		{"Unknown", verbs.Options{"queues": "4"}, config{}, verbs.ErrInvalidArgument},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseOptions(tc.opts)
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("parseOptions(%v) error %v, want %v", tc.opts, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("parseOptions(%v) = %+v, %v; want %+v", tc.opts, got, err, tc.want)
			}
		})
	}
}

func TestPickGID(t *testing.T) {
	v4 := verbs.GIDFromAddr(netip.MustParseAddr("192.0.2.7"))
	v6 := verbs.GIDFromAddr(netip.MustParseAddr("fe80::1"))
	tests := []struct {
		name    string
		entries []gidEntry
		port    int
		ipv6    bool
		want    int // -1: an error
	}{
		{"Empty", nil, 1, false, -1},
		{"MlxTypical", []gidEntry{
			{v6, 0, 1, gidTypeRoCEv1}, {v6, 1, 1, gidTypeRoCEv2},
			{v4, 2, 1, gidTypeRoCEv1}, {v4, 3, 1, gidTypeRoCEv2},
		}, 1, false, 3},
		{"MlxTypicalIPv6", []gidEntry{
			{v6, 0, 1, gidTypeRoCEv1}, {v6, 1, 1, gidTypeRoCEv2},
			{v4, 2, 1, gidTypeRoCEv1}, {v4, 3, 1, gidTypeRoCEv2},
		}, 1, true, 1},
		{"OnlyV1", []gidEntry{{v4, 2, 1, gidTypeRoCEv1}}, 1, false, -1},
		{"OnlyIPv6V2", []gidEntry{{v6, 1, 1, gidTypeRoCEv2}}, 1, false, -1},
		{"OtherPort", []gidEntry{{v4, 3, 2, gidTypeRoCEv2}}, 1, false, -1},
		{"LowestIndex", []gidEntry{{v4, 7, 1, gidTypeRoCEv2}, {v4, 5, 1, gidTypeRoCEv2}}, 1, false, 5},
		{"InfiniBand", []gidEntry{{v6, 0, 1, gidTypeIB}}, 1, false, -1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := pickGID(tc.entries, tc.port, tc.ipv6)
			if tc.want < 0 {
				if !errors.Is(err, verbs.ErrNoDevice) {
					t.Fatalf("pickGID = %d, %v; want an error wrapping ErrNoDevice", got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("pickGID = %d, %v; want %d", got, err, tc.want)
			}
		})
	}
}

// TestAtomicBigEndian: a device that advertises atomics (IBV_ATOMIC_HCA
// or GLOB) uses the host's byte order, as mlx5's driver reports it; the
// atomic_order option overrides; without atomics there is no order.
func TestAtomicBigEndian(t *testing.T) {
	tests := []struct {
		cap      int
		hostBE   bool
		override string
		be, ok   bool
	}{
		{atomicHCA, false, "", false, true},
		{atomicGlob, false, "", false, true},
		{atomicHCA, true, "", true, true},
		{atomicNone, false, "", false, false},
		{atomicHCA, false, "be", true, true},
		{atomicNone, false, "be", true, true},
		{atomicGlob, true, "host", true, true},
	}
	for _, tc := range tests {
		be, ok := atomicBigEndian(tc.cap, tc.hostBE, tc.override)
		if be != tc.be || ok != tc.ok {
			t.Errorf("atomicBigEndian(%d, %v, %q) = %v, %v; want %v, %v", tc.cap, tc.hostBE, tc.override, be, ok, tc.be, tc.ok)
		}
	}
}
