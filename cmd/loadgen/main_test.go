package main

import (
	"bytes"
	"net"
	"strings"
	"testing"

	"github.com/seqd/seqd/spec"
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
		{[]string{"-erpc-link-rate", "-1"}, "-erpc-link-rate -1"},
		{[]string{"-erpc-link-rate", "NaN"}, "-erpc-link-rate NaN"},
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

// TestHelpAndErrorsReadable is issue 29 items 2 and 4: -h explains the
// table's columns and the plot's clients×window labels; an unknown mode
// is refused with the modes there are; a missing server names the way
// out; no help text names a Go identifier.
func TestHelpAndErrorsReadable(t *testing.T) {
	var out, errb bytes.Buffer
	if code := realMainEnv([]string{"-h"}, &out, &errb, nil); code != 0 {
		t.Fatalf("-h: exit %d", code)
	}
	help := errb.String()
	for _, want := range []string{"columns of the table (-engine client)", "columns of the table (-engine wire)",
		"\n  lost ", "\n  stale ", "\n  spec misses ", "\n  retransmits ", "\n  drops ", "clients×window: client threads × requests outstanding per client"} {
		if !strings.Contains(help, want) {
			t.Errorf("-h lacks %q", want)
		}
	}
	for _, bad := range []string{"spec.", "Config."} {
		if strings.Contains(help, bad) {
			t.Errorf("-h names a Go identifier (%q)", bad)
		}
	}
	errb.Reset()
	if code := realMainEnv([]string{"-modes", "spec-s0,fast"}, &out, &errb, nil); code != 2 ||
		!strings.Contains(errb.String(), `-modes: unknown mode "fast": want `+spec.ModeList(spec.Modes)) {
		t.Errorf("-modes fast: exit %d, %q", code, errb.String())
	}
	errb.Reset()
	if code := realMainEnv([]string{"-queue-pairs", "100000"}, &out, &errb, nil); code != 2 || !strings.Contains(errb.String(), "-queue-pairs 100000") {
		t.Errorf("-queue-pairs 100000: exit %d, %q", code, errb.String())
	}
	errb.Reset()
	out.Reset()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	code := realMainEnv([]string{"-admin", addr, "-echo", "-1s", "-quiet"}, &out, &errb, nil)
	if code != 1 || !strings.Contains(errb.String(), "is seqd running at -admin "+addr+"?") || !strings.Contains(errb.String(), "-spawn") {
		t.Errorf("no server: exit %d, %q", code, errb.String())
	}
	if out.Len() != 0 {
		t.Errorf("no server: an empty table printed:\n%s", out.String())
	}
}
