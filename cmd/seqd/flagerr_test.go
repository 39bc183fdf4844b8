package main

import (
	"strings"
	"testing"
)

// TestFlagErrorsInFlagTerms: values the data path or a listener refuses
// are reported once, in flag terms, without Go names or a panic
// (-resp-qps 1000 crashed in every worker-pool mode: the failed worker's
// cleanup ran on a nil worker).
func TestFlagErrorsInFlagTerms(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"resp-qps", []string{"-resp-qps", "1000"}, "seqd: invalid config: -resp-qps 1000: at most 255 response QPs per worker"},
		{"max-window", []string{"-max-window", "100000"}, "seqd: invalid config: -max-window 100000 is above the protocol's 2048"},
		{"metrics", []string{"-metrics", "127.0.0.1:bad"}, "seqd: -metrics: listen tcp"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out syncBuf
			args := append([]string{"-init", "-data", t.TempDir(), "-admin", "127.0.0.1:0", "-device", "127.0.0.1:0", "-metrics", "off",
				"-log-level", "error"}, tc.args...)
			var code int
			func() {
				defer func() {
					if p := recover(); p != nil {
						t.Fatalf("seqd %v panicked: %v", tc.args, p)
					}
				}()
				code = realMainEnv(args, &out, nil)
			}()
			msg := out.String()
			if code == 0 || !strings.Contains(msg, tc.want) {
				t.Fatalf("seqd %v: exit %d, %q; want %q", tc.args, code, msg, tc.want)
			}
			for _, bad := range []string{"MaxWindow", "RespQPs", "{PD:", "admin: metrics:", "listener: admin:"} {
				if strings.Contains(msg, bad) {
					t.Errorf("%q in %q", bad, msg)
				}
			}
		})
	}
}
