package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestBadInputExitsNonZero(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	os.WriteFile(file, []byte("x"), 0o644)
	badCfg := filepath.Join(dir, "bad.conf")
	os.WriteFile(badCfg, []byte("workers=2\nnosuch=1\n"), 0o644)
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"unknown flag", []string{"-nosuch"}, "not defined"},
		{"bad format", []string{"-format", "weird"}, "format"},
		{"bad mode", []string{"-mode", "herd2"}, "mode"},
		{"data is a file", []string{"-data", file}, "not a directory"},
		{"negative workers", []string{"-workers", "-1"}, "negative"},
		{"bad cores", []string{"-cores", "a,b"}, "core"},
		{"bad config line", []string{"-config", badCfg}, "unknown flag"},
		{"missing config", []string{"-config", filepath.Join(dir, "none")}, "no such file"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var out strings.Builder
			if code := realMain(c.args, &out); code == 0 {
				t.Fatalf("exit 0 for %v", c.args)
			}
			if !strings.Contains(out.String(), c.want) {
				t.Fatalf("message %q does not mention %q", out.String(), c.want)
			}
		})
	}
}
