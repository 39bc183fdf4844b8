package headeronly

import (
	"errors"
	"testing"
)

// TestParseRecv: the request queue layouts read as seqd's -spec-s0-recv
// names them, the empty string as the default (per session), and
// anything else is an ErrConfig that names both choices.
func TestParseRecv(t *testing.T) {
	for _, tc := range []struct {
		in     string
		shared bool
		ok     bool
	}{
		{"", false, true},
		{RecvPerSession, false, true},
		{RecvShared, true, true},
		{"Shared", false, false},
		{"true", false, false},
		{"per-worker", false, false},
		{" shared", false, false},
	} {
		shared, err := ParseRecv(tc.in)
		if tc.ok != (err == nil) || shared != tc.shared {
			t.Errorf("ParseRecv(%q) = %v, %v; want %v, ok %v", tc.in, shared, err, tc.shared, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrConfig) {
			t.Errorf("ParseRecv(%q): %v is not ErrConfig", tc.in, err)
		}
		if err == nil && tc.in != "" && recvName(shared) != tc.in {
			t.Errorf("recvName(%v) = %q, want %q", shared, recvName(shared), tc.in)
		}
	}
}
