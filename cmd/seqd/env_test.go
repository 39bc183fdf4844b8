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
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	var errb bytes.Buffer
	if code := realMainEnv([]string{"-version"}, &errb, lookup); code != 0 {
		t.Fatalf("-version with a bad SEQD_FORMAT: exit %d (flags are checked only when seqd would run)", code)
	}
	errb.Reset()
	if code := realMainEnv([]string{"-data", t.TempDir()}, &errb, lookup); code != 2 || !strings.Contains(errb.String(), "format") {
		t.Fatalf("SEQD_FORMAT=bogus: exit %d %q", code, errb.String())
	}
	env = map[string]string{"SEQD_LOG_LEVEL": "loud"}
	errb.Reset()
	if code := realMainEnv(nil, &errb, lookup); code != 2 || !strings.Contains(errb.String(), "SEQD_LOG_LEVEL") {
		t.Fatalf("SEQD_LOG_LEVEL=loud: exit %d %q", code, errb.String())
	}
	// The command line wins: -log-format text over SEQD_LOG_FORMAT=xml.
	env = map[string]string{"SEQD_LOG_FORMAT": "xml", "SEQD_DATA": "/nonexistent/seqd-env-test"}
	errb.Reset()
	code := realMainEnv([]string{"-log-format", "json", "-metrics", "off", "-admin", "127.0.0.1:0", "-device", "127.0.0.1:0"}, &errb, lookup)
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
