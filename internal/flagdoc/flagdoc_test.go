package flagdoc

import (
	"errors"
	"flag"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
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
	known := map[string]bool{} // every flag's variable, of every binary
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
			known[f.Env] = true
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
	checkKnobs(t, known)
}

// knobRead is a test or program reading a variable with a binary's
// prefix; knobSet a script, Makefile or document setting one.
var (
	knobRead = regexp.MustCompile(`os\.(?:Getenv|LookupEnv)\("((?:SEQD|SEQCTL|LOADGEN)_[A-Z0-9_]+)"\)`)
	knobSet  = regexp.MustCompile(`(?:^|[\s;(])((?:SEQD|SEQCTL|LOADGEN)_[A-Z0-9_]+)=`)
)

// checkKnobs: every variable with a binary's prefix that the tree reads
// (os.Getenv) or sets (a script, the Makefile, a document's command)
// sets a flag or is envflag.Reserved. A seqd started by a test inherits
// the test's environment and refuses an unknown SEQD_ variable (issue 29
// item 1): SEQD_FAILOVER_TRIALS, a test knob, made every seqd of the
// failover test exit ("unknown variable SEQD_FAILOVER_TRIALS").
func checkKnobs(t *testing.T, known map[string]bool) {
	t.Helper()
	root := "../.."
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") && name != ".ci" || name == "testdata" || name == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		var re *regexp.Regexp
		switch {
		case strings.HasSuffix(name, ".go"):
			re = knobRead
		case strings.HasSuffix(name, ".sh"), strings.HasSuffix(name, ".md"), name == "Makefile", name == "run" && strings.Contains(path, ".ci"):
			re = knobSet
		default:
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range re.FindAllStringSubmatch(string(b), -1) {
			if k := m[1]; !known[k] && !envflag.IsReserved(k) {
				rel, _ := filepath.Rel(root, path)
				t.Errorf("%s: %s sets no flag and is not envflag.Reserved: a binary started with it in its environment refuses to start (name test knobs SEQD_TEST_*)", rel, k)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
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
