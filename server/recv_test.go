package server

import (
	"errors"
	"strings"
	"testing"
)

// TestSpecS0Recv: -spec-s0-recv defaults to per-session request QPs,
// "shared" selects the shared ones, and any other value is refused in
// flag terms, naming both choices.
func TestSpecS0Recv(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		shared   bool
		err      string
	}{
		{"", RecvPerSession, false, ""},
		{RecvPerSession, RecvPerSession, false, ""},
		{RecvShared, RecvShared, true, ""},
		{"yes", "", false, `-spec-s0-recv "yes": want per-session or shared`},
	} {
		c := Config{Data: t.TempDir(), SpecS0Recv: tc.in}
		err := c.Validate()
		if tc.err != "" {
			if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("-spec-s0-recv %q: %v, want ErrConfig with %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || c.SpecS0Recv != tc.want || c.sharedRecv != tc.shared {
			t.Errorf("-spec-s0-recv %q: %v, SpecS0Recv %q shared %v; want %q, %v", tc.in, err, c.SpecS0Recv, c.sharedRecv, tc.want, tc.shared)
		}
	}
}
