package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/seqd/seqd/oracle"
)

// markedDir returns a data directory holding a valid mark file, written
// by an oracle that handed out values.
func markedDir(t *testing.T) (dir, mark string) {
	t.Helper()
	dir = t.TempDir()
	o, err := oracle.Open(context.Background(), oracle.Config{Dir: dir, Init: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := o.Claim(1000); err != nil {
		t.Fatal(err)
	}
	o.Close()
	mark = filepath.Join(dir, oracle.MarkFileName)
	if _, err := os.Stat(mark); err != nil {
		t.Fatal(err)
	}
	return dir, mark
}

// TestRefusesBadMarkFile: a corrupt or truncated mark file is detected by
// its checksum (or length); seqd exits non-zero naming the file and how
// to recover, and leaves the file as it was: it never starts over at a
// lower value.
func TestRefusesBadMarkFile(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(b []byte) []byte
	}{
		{"bit flip in the mark", func(b []byte) []byte { b[len(b)-6] ^= 0x10; return b }},
		{"bad checksum", func(b []byte) []byte { b[len(b)-1] ^= 0xff; return b }},
		{"truncated", func(b []byte) []byte { return b[:len(b)/2] }},
		{"empty", func(b []byte) []byte { return nil }},
		{"trailing garbage", func(b []byte) []byte { return append(b, 0) }},
		{"text", func(b []byte) []byte { return []byte("12345\n") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, mark := markedDir(t)
			b, err := os.ReadFile(mark)
			if err != nil {
				t.Fatal(err)
			}
			bad := tc.damage(bytes.Clone(b))
			if err := os.WriteFile(mark, bad, 0o644); err != nil {
				t.Fatal(err)
			}
			var out strings.Builder
			code := realMain([]string{"-data", dir, "-admin", "127.0.0.1:0", "-metrics", "off", "-device", "127.0.0.1:0"}, &out)
			if code == 0 {
				t.Fatalf("started with a damaged mark file")
			}
			msg := out.String()
			for _, want := range []string{oracle.MarkFileName, "restore the file from a backup"} {
				if !strings.Contains(msg, want) {
					t.Errorf("message does not say %q:\n%s", want, msg)
				}
			}
			if after, _ := os.ReadFile(mark); !bytes.Equal(after, bad) {
				t.Errorf("the damaged mark file was rewritten")
			}
		})
	}
}

// TestBadDataDirAndFlags: data directories seqd cannot use and invalid
// values of the robustness flags exit non-zero with a clear message.
func TestBadDataDirAndFlags(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	os.WriteFile(file, []byte("x"), 0o644)
	markIsDir := t.TempDir()
	os.Mkdir(filepath.Join(markIsDir, oracle.MarkFileName), 0o755)
	base := []string{"-admin", "127.0.0.1:0", "-metrics", "off", "-device", "127.0.0.1:0"}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"data under a file", []string{"-data", filepath.Join(file, "sub")}, "not a directory"},
		{"mark file is a directory", []string{"-data", markIsDir}, oracle.MarkFileName},
		{"lease too short", []string{"-session-lease", "1ms"}, "session-lease"},
		{"bad provider option", []string{"-provider-opts", "loss"}, "provider-opts"},
		{"bad admin address", []string{"-admin", "nohost"}, "admin"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out strings.Builder
			args := append(append([]string{}, base...), tc.args...)
			if !strings.Contains(strings.Join(tc.args, " "), "-data") {
				args = append(args, "-data", t.TempDir())
			}
			if code := realMain(args, &out); code == 0 {
				t.Fatalf("exit 0 for %v", tc.args)
			}
			if !strings.Contains(out.String(), tc.want) {
				t.Fatalf("message %q does not mention %q", out.String(), tc.want)
			}
		})
	}
	if os.Geteuid() != 0 {
		ro := t.TempDir()
		os.Chmod(ro, 0o500)
		defer os.Chmod(ro, 0o700)
		var out strings.Builder
		if code := realMain(append(base, "-data", ro), &out); code == 0 {
			t.Fatalf("started with an unwritable data directory")
		}
		t.Logf("unwritable data directory: %s", out.String())
	} else {
		t.Log("running as root: the unwritable data directory case needs an unprivileged user")
	}
}
