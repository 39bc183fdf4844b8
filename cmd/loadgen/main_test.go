package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-clients", "0"}, "-clients 0"},
		{[]string{"-clients", "many"}, "invalid value"},
		{[]string{"-window", "0"}, "-window 0"},
		{[]string{"-queue-pairs", "1", "-window", "100000"}, "-window 100000"},
		{[]string{"-queue-pairs", "-1"}, "-queue-pairs -1"},
		{[]string{"-qps", "-1"}, "-qps is deprecated"},
		{[]string{"-log-level", "loud"}, "log-level"},
		{[]string{"-log-format", "xml"}, "log-format"},
		{[]string{"-sweep-window", "1,x"}, `"x" is not an integer`},
		{[]string{"-sweep-clients", "0"}, "-sweep-clients 0"},
		{[]string{"-cores", "-1"}, "-cores -1"},
		{[]string{"-plot", "out.jpg"}, ".png or .svg"},
		{[]string{"-admin", "nohostport"}, "-admin"},
		{[]string{"-admin", "::1:7070"}, "IPv6 host goes in brackets"},
		{[]string{"-admin", "127.0.0.1:7070,,127.0.0.1:7071"}, "empty address"},
		{[]string{"-duration", "-1s"}, "negative"},
		{[]string{"-modes", "spec-s0, ,other x"}, "mode"},
		{[]string{"stray"}, "unexpected arguments"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var out, errb bytes.Buffer
			if code := realMain(tc.args, &out, &errb); code != 2 {
				t.Fatalf("exit %d, want 2; stderr %s", code, errb.String())
			}
			if !strings.Contains(errb.String(), tc.want) {
				t.Fatalf("stderr %q does not mention %q", errb.String(), tc.want)
			}
		})
	}
}

// TestOneLoadgenPrefix is issue 29 item 1: "loadgen: loadgen: invalid
// config" doubled its prefix, and an unknown LOADGEN_ variable was
// silently ignored.
func TestOneLoadgenPrefix(t *testing.T) {
	var out, errb bytes.Buffer
	if code := realMain([]string{"-window", "0"}, &out, &errb); code != 2 || strings.Contains(errb.String(), "loadgen: loadgen:") {
		t.Fatalf("exit %d, stderr %q", code, errb.String())
	}
	errb.Reset()
	if code := realMainEnv(nil, &out, &errb, []string{"LOADGEN_QPS_PER_CLIENT=4"}); code != 2 || !strings.Contains(errb.String(), "LOADGEN_QPS_PER_CLIENT") {
		t.Fatalf("LOADGEN_QPS_PER_CLIENT: exit %d, stderr %q", code, errb.String())
	}
	errb.Reset()
	if code := realMainEnv([]string{"-h"}, &out, &errb, nil); code != 0 || strings.Contains(errb.String(), "floor-server") || strings.Contains(errb.String(), "floor-depth") || !strings.Contains(errb.String(), "env LOADGEN_QUEUE_PAIRS\n") {
		t.Fatalf("-h: exit %d, stderr %q", code, errb.String())
	}
}
