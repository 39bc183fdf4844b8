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
		{"Defaults", nil, config{port: 1, gidIndex: -1}, nil},
		{"Port", verbs.Options{"port": "2"}, config{port: 2, gidIndex: -1}, nil},
		{"GIDIndex", verbs.Options{"gid_index": "3"}, config{port: 1, gidIndex: 3}, nil},
		{"GIDIndexZero", verbs.Options{"gid_index": "0"}, config{port: 1, gidIndex: 0}, nil},
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
		want    int
	}{
		{"Empty", nil, 1, 0},
		{"MlxTypical", []gidEntry{
			{v6, 0, 1, gidTypeRoCEv1}, {v6, 1, 1, gidTypeRoCEv2},
			{v4, 2, 1, gidTypeRoCEv1}, {v4, 3, 1, gidTypeRoCEv2},
		}, 1, 3},
		{"OnlyV1", []gidEntry{{v4, 2, 1, gidTypeRoCEv1}}, 1, 0},
		{"OnlyIPv6V2", []gidEntry{{v6, 1, 1, gidTypeRoCEv2}}, 1, 0},
		{"OtherPort", []gidEntry{{v4, 3, 2, gidTypeRoCEv2}}, 1, 0},
		{"LowestIndex", []gidEntry{{v4, 7, 1, gidTypeRoCEv2}, {v4, 5, 1, gidTypeRoCEv2}}, 1, 5},
		{"InfiniBand", []gidEntry{{v6, 0, 1, gidTypeIB}}, 1, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := pickGID(tc.entries, tc.port); got != tc.want {
				t.Fatalf("pickGID = %d, want %d", got, tc.want)
			}
		})
	}
}
