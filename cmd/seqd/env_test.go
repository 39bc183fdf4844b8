package main

import (
	"bytes"
	"io"
	"strings"
	"testing"
)

// TestEnvAndLogFlags: a SEQD_* variable sets its flag, the command line
// wins over it, a bad value names the variable, and -log-format json
// makes every line JSON.
func TestEnvAndLogFlags(t *testing.T) {
	defer func(w io.Writer) { stdout = w }(stdout)
	stdout = io.Discard
	env := map[string]string{"SEQD_FORMAT": "bogus"}
	var errb bytes.Buffer
	if code := realMainEnv([]string{"-version"}, &errb, environ(env)); code != 0 {
		t.Fatalf("-version with a bad SEQD_FORMAT: exit %d (flags are checked only when seqd would run)", code)
	}
	errb.Reset()
	if code := realMainEnv([]string{"-data", t.TempDir()}, &errb, environ(env)); code != 2 || !strings.Contains(errb.String(), "format") {
		t.Fatalf("SEQD_FORMAT=bogus: exit %d %q", code, errb.String())
	}
	env = map[string]string{"SEQD_LOG_LEVEL": "loud"}
	errb.Reset()
	if code := realMainEnv(nil, &errb, environ(env)); code != 2 || !strings.Contains(errb.String(), "SEQD_LOG_LEVEL") {
		t.Fatalf("SEQD_LOG_LEVEL=loud: exit %d %q", code, errb.String())
	}
	// The command line wins: -log-format text over SEQD_LOG_FORMAT=xml.
	env = map[string]string{"SEQD_LOG_FORMAT": "xml", "SEQD_DATA": "/nonexistent/seqd-env-test"}
	errb.Reset()
	code := realMainEnv([]string{"-log-format", "json", "-metrics", "off", "-admin", "127.0.0.1:0", "-device", "127.0.0.1:0"}, &errb, environ(env))
	if code != 1 {
		t.Fatalf("missing data dir from SEQD_DATA: exit %d %q", code, errb.String())
	}
	for _, line := range strings.Split(strings.TrimSpace(errb.String()), "\n") {
		if !strings.HasPrefix(line, "{") && !strings.HasPrefix(line, "seqd:") {
			t.Errorf("not a JSON log line: %q", line)
		}
	}
	if !strings.Contains(errb.String(), "/nonexistent/seqd-env-test") {
		t.Errorf("SEQD_DATA not used: %q", errb.String())
	}
}

// environ is env as os.Environ returns it.
func environ(env map[string]string) []string {
	var l []string
	for k, v := range env {
		l = append(l, k+"="+v)
	}
	return l
}

// TestUnknownEnv is issue 29 item 1: a mistyped SEQD_ADMN was silently
// ignored while a mistyped -config key stops seqd. Now both do; seqd-pd's
// SEQD_PD_* and the test knobs do not.
func TestUnknownEnv(t *testing.T) {
	var errb bytes.Buffer
	code := realMainEnv([]string{"-data", "/nonexistent/seqd-unknown-env"}, &errb, []string{"SEQD_ADMN=127.0.0.1:1"})
	if code != 2 || !strings.Contains(errb.String(), "SEQD_ADMN") {
		t.Fatalf("SEQD_ADMN: exit %d %q", code, errb.String())
	}
	errb.Reset()
	code = realMainEnv([]string{"-data", "/nonexistent/seqd-unknown-env", "-metrics", "off", "-admin", "127.0.0.1:0", "-device", "127.0.0.1:0"}, &errb,
		[]string{"SEQD_PD_ADMIN=x", "SEQD_SOAK=1", "SEQD_RIG_STORM=1", "SEQD_FLAGS=-init"})
	if code != 1 || strings.Contains(errb.String(), "unknown variable") {
		t.Fatalf("SEQD_PD_ADMIN and test knobs: exit %d %q", code, errb.String())
	}
}

// TestHelpExitsZero: -h printed the flags and exited 2.
func TestHelpExitsZero(t *testing.T) {
	for _, arg := range []string{"-h", "-help", "--help"} {
		var errb bytes.Buffer
		if code := realMainEnv([]string{arg}, &errb, nil); code != 0 || !strings.Contains(errb.String(), "env SEQD_ADMIN\n") {
			t.Fatalf("%s: exit %d %q", arg, code, errb.String())
		}
	}
}
