package flagdoc

import (
	"errors"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/seqd/seqd/internal/envflag"
)

var update = flag.Bool("update", false, "rewrite README.md's flag tables from the binaries' -h")

// binaries is the one table of the four binaries: name and variable
// prefix.
var binaries = []struct{ name, prefix string }{
	{"seqd", envflag.PrefixSeqd},
	{"seqctl", envflag.PrefixSeqctl},
	{"loadgen", envflag.PrefixLoadgen},
	{"seqd-pd", envflag.PrefixSeqdPD},
}

// retired are names that meant different things in different binaries
// (-seqd: admin addresses in seqd-pd, a binary's path in loadgen; -qps:
// queue pairs read as queries per second; -json: a bool in seqctl status,
// a file in loadgen): no binary has them but as deprecated aliases.
var retired = []string{"seqd", "qps", "json"}

// everywhere are the flags every binary has.
var everywhere = []string{"version", "log-level", "log-format"}

// TestFlagTables is issue 29 item 1: it builds the four binaries, runs
// each one's -h, checks it exits 0 and lists every flag with its variable
// under the binary's prefix, that they share -version, -log-level and
// -log-format and none has a retired name, and that README.md's flag
// tables are what the binaries say (-update rewrites them).
func TestFlagTables(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command to build the binaries:", err)
	}
	dir := t.TempDir()
	build := exec.Command("go", "build", "-o", dir+"/", "./cmd/seqd", "./cmd/seqctl", "./cmd/loadgen", "./cmd/seqd-pd")
	build.Dir = "../.."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(readme)
	for _, b := range binaries {
		cmd := exec.Command(filepath.Join(dir, b.name), "-h")
		cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if errors.As(err, &exit) || err != nil {
			t.Errorf("%s -h: %v (want exit 0)\n%s", b.name, err, out)
			continue
		}
		h, err := Parse(string(out))
		if err != nil {
			t.Errorf("%s -h: %v", b.name, err)
			continue
		}
		has := map[string]bool{}
		for _, f := range h.Flags {
			has[f.Name] = true
			want := envflag.Name(b.prefix, f.Name)
			if f.Name == "version" {
				want = ""
			}
			if f.Env != want {
				t.Errorf("%s -%s: variable %q, want %q", b.name, f.Name, f.Env, want)
			}
			if strings.HasPrefix(f.Usage, "internal:") {
				t.Errorf("%s -h lists internal flag -%s", b.name, f.Name)
			}
		}
		for _, n := range everywhere {
			if !has[n] {
				t.Errorf("%s has no -%s", b.name, n)
			}
		}
		for _, n := range retired {
			if has[n] {
				t.Errorf("%s still has -%s (retired: it meant different things)", b.name, n)
			}
		}
		for old, now := range h.Deprecated {
			if !has[now] {
				t.Errorf("%s: deprecated -%s names -%s, which it lacks", b.name, old, now)
			}
		}
		table := Table(h)
		if *update {
			if doc, err = Replace(doc, b.name, table); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := Section(doc, b.name)
		if err != nil {
			t.Errorf("README.md: %v", err)
			continue
		}
		if got != table {
			t.Errorf("README.md's %s flag table is not what %s -h says (go test ./internal/flagdoc -update rewrites it):\n%s\nwant:\n%s", b.name, b.name, got, table)
		}
	}
	if *update && !t.Failed() {
		if err := os.WriteFile("../../README.md", []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestParse reads envflag.Usage's form back.
func TestParse(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.String("admin", "127.0.0.1:7070", "admin `addresses`")
	fs.Bool("version", false, "print the version")
	fs.Int("queue-pairs", 0, "queue pairs | per client")
	envflag.Alias(fs, "qps", "queue-pairs", nil)
	var b strings.Builder
	envflag.Usage(&b, fs, "X_")
	h, err := Parse(b.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Flags) != 3 || h.Flags[0] != (Flag{Name: "admin", Arg: "addresses", Usage: "admin addresses", Default: "127.0.0.1:7070", Env: "X_ADMIN"}) ||
		h.Flags[2].Env != "" || h.Deprecated["qps"] != "queue-pairs" {
		t.Fatalf("%+v", h)
	}
	want := "| `-queue-pairs int` | `X_QUEUE_PAIRS` |  | queue pairs \\| per client |\n"
	if got := Table(h); !strings.Contains(got, want) || !strings.Contains(got, "`-qps` (now `-queue-pairs`)") {
		t.Fatalf("table:\n%s\nlacks %q", got, want)
	}
}
