package main

import (
	"strings"
	"testing"
)

// TestSpecS0RecvFlag: a bad -spec-s0-recv, on the command line or in
// SEQD_SPEC_S0_RECV, stops seqd with exit 2 and names the choices.
func TestSpecS0RecvFlag(t *testing.T) {
	const want = `seqd: invalid config: -spec-s0-recv "per-worker": want per-session or shared`
	base := []string{"-init", "-data", t.TempDir(), "-admin", "127.0.0.1:0", "-device", "127.0.0.1:0", "-metrics", "off", "-log-level", "error"}
	for _, tc := range []struct {
		name string
		args []string
		env  []string
	}{
		{"flag", append(base, "-spec-s0-recv", "per-worker"), nil},
		{"env", base, []string{"SEQD_SPEC_S0_RECV=per-worker"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out syncBuf
			code := realMainEnv(tc.args, &out, tc.env)
			if code != 2 || !strings.Contains(out.String(), want) {
				t.Fatalf("exit %d, %q; want exit 2 and %q", code, out.String(), want)
			}
		})
	}
}
