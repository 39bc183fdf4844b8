package logflag

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"strings"
	"testing"
)

func TestFlags(t *testing.T) {
	for _, tc := range []struct {
		args       []string
		json       bool
		debug, inf bool
	}{
		{nil, false, false, true},
		{[]string{"-log-format", "json"}, true, false, true},
		{[]string{"-log-level", "debug"}, false, true, true},
		{[]string{"-log-level", "warn", "-log-format", "json"}, true, false, false},
	} {
		var c Config
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		c.Register(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		l, err := c.Logger(&buf)
		if err != nil {
			t.Fatal(err)
		}
		l.Debug("d", "k", 1)
		l.Info("i", "k", 2)
		l.Warn("w", "k", 3)
		out := buf.String()
		if got := strings.Contains(out, "msg=d ") || strings.Contains(out, `"msg":"d"`); got != tc.debug {
			t.Errorf("%v: debug shown %v:\n%s", tc.args, got, out)
		}
		if got := strings.Contains(out, "msg=i") || strings.Contains(out, `"msg":"i"`); got != tc.inf {
			t.Errorf("%v: info shown %v:\n%s", tc.args, got, out)
		}
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			var m map[string]any
			if isJSON := json.Unmarshal([]byte(line), &m) == nil; isJSON != tc.json {
				t.Errorf("%v: line %q JSON %v", tc.args, line, isJSON)
			}
		}
	}
	var c Config
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	c.Register(fs)
	if err := fs.Parse([]string{"-log-level", "loud"}); err == nil {
		t.Error("-log-level loud accepted")
	}
	c.Format = "xml"
	if _, err := c.Logger(&bytes.Buffer{}); !errors.Is(err, ErrFormat) {
		t.Errorf("-log-format xml: %v", err)
	}
}
