package main

import (
	"net"
	"strings"
	"testing"
	"time"
)

// TestErrorsInFlagTerms is issue 29 item 2: each error says what failed
// once, in flag terms, with the way out, on one line of stderr; bad
// values are refused before seqd is dialled (base: -cluster-id 0 and
// -timeout 0 went on to dial, and a missing seqd was logged as "dial
// seqd ...: client: server unavailable: unavailable: dial ...").
func TestErrorsInFlagTerms(t *testing.T) {
	defer func(e func() []string) { environ = e }(environ)
	environ = func() []string { return nil }
	defer func(w time.Duration) { startWait = w }(startWait)
	startWait = 500 * time.Millisecond // a dead seqd is asked again until then
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := lis.Addr().String()
	lis.Close()
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"-admin", dead, "-cluster-id", "0"}, 2, "seqd-pd: -cluster-id 0: want a nonzero PD cluster ID\n"},
		{[]string{"-admin", dead, "-timeout", "0s"}, 2, "seqd-pd: -timeout 0s: want a positive duration\n"},
		{[]string{"-admin", dead, "-listen", "nohostport"}, 2, `seqd-pd: -listen "nohostport": want host:port` + "\n"},
		{[]string{"-admin", "bad"}, 2, `seqd-pd: -admin: bad address: "bad": want host:port`},
		{[]string{"-admin", dead, "-metrics", "off", "-listen", "127.0.0.1:0"}, 1,
			"seqd-pd: no seqd answers at -admin " + dead + ": dial " + dead + ": cannot connect"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var logs syncBuf
			code := run(t.Context(), tc.args, &logs, nil, nil)
			// The error is stderr's last line (a dead seqd is waited
			// for first, which is logged).
			lines := strings.Split(strings.TrimSuffix(logs.String(), "\n"), "\n")
			msg := lines[len(lines)-1] + "\n"
			if code != tc.code || !strings.HasPrefix(msg, tc.want) {
				t.Fatalf("exit %d %q, want %d and %q", code, msg, tc.code, tc.want)
			}
			if tc.code == 1 && !strings.Contains(msg, "-admin HOST:PORT") {
				t.Errorf("no way out in %q", msg)
			}
			for _, bad := range []string{"admin: admin", "unavailable: unavailable", "server unavailable", "level="} {
				if strings.Contains(msg, bad) {
					t.Errorf("%q in %q", bad, msg)
				}
			}
		})
	}
}
