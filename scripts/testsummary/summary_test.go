package main

import (
	"bytes"
	"os"
	"regexp"
	"strings"
	"testing"
)

// The fixtures are `go test -json -count=1 -timeout 3s ./...` of a small
// module, recorded: mixed.json has packages a (a pass, a failure with a
// log line, a skip, and subtests that pass, skip and fail), b (a test
// file that does not build), c (no test files), d (two passes and a
// skip), e (a test that panics) and f (a test that outlives -timeout);
// pass.json is c and d alone.

func fixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// summarize runs the summarizer on input and returns its output, its
// exit code and the output's last line.
func summarize(t *testing.T, args []string, input []byte) (string, int, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(args, bytes.NewReader(input), &out, &errOut)
	if errOut.Len() > 0 {
		t.Logf("stderr: %s", errOut.String())
	}
	lines := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
	return out.String(), code, lines[len(lines)-1]
}

// inOrder fails unless each of want occurs in s after the one before.
func inOrder(t *testing.T, s string, want ...string) {
	t.Helper()
	at := 0
	for _, w := range want {
		i := strings.Index(s[at:], w)
		if i < 0 {
			t.Fatalf("missing (or out of order): %q\nin:\n%s", w, s)
		}
		at += i + len(w)
	}
}

func TestMixedRun(t *testing.T) {
	out, code, last := summarize(t, nil, fixture(t, "mixed.json"))
	if code != 1 {
		t.Errorf("exit code %d, want 1", code)
	}
	// TestPass, TestSub/one, d's TestOne and TestTwo, e's TestFine, f's
	// TestQuick passed; TestFail, TestSub/three, TestSub, b's build, e's
	// TestPanics and f's TestHangs (unfinished) failed.
	if last != "6 passed, 6 failed, 3 skipped" {
		t.Errorf("closing line %q", last)
	}
	// One line per package as it ends, in the order they end, each
	// failure's output in full right after its package's line.
	inOrder(t, out,
		"FAIL  example.com/fx/a ", "a log line of the code under test", "a_test.go:12: got 2, want 3", "a_test.go:23: three failed",
		"FAIL  example.com/fx/b [build failed", `b/b_test.go:5:40: cannot use "no"`,
		"?     example.com/fx/c [no test files]",
		"ok    example.com/fx/d 0.0s (2 passed, 1 skipped)",
		"FAIL  example.com/fx/e ", "panic: assignment to entry in nil map",
		"FAIL  example.com/fx/f 3.0s (0 failed, 1 did not finish)", "panic: test timed out after 3s",
		"=== Skipped (3):",
		"SKIP  example.com/fx/a TestSkip: a_test.go:15: needs etcd: etcd not in PATH\n",
		"SKIP  example.com/fx/a TestSub/two: a_test.go:21: tshark missing: exec: \"tshark\": executable file not found in $PATH\n",
		"SKIP  example.com/fx/d TestRoot: d_test.go:9: needs root\n",
		"=== Failed (6)",
		"FAIL  example.com/fx/a TestFail\n", "a_test.go:12: got 2, want 3",
		"FAIL  example.com/fx/b (package)", "cannot use",
		"FAIL  example.com/fx/f TestHangs\n", "did not finish",
		"\n6 passed, 6 failed, 3 skipped\n")
	// Passed tests' output is not printed; the failed section drops the
	// log lines of the code under test.
	if strings.Contains(out, "TestSub/one") || strings.Contains(out, "TestFine") {
		t.Errorf("a passed test's output printed:\n%s", out)
	}
	failed := out[strings.Index(out, "=== Failed"):]
	if strings.Contains(failed, "a log line") {
		t.Errorf("the failed section keeps a log line:\n%s", failed)
	}
}

func TestAllPassed(t *testing.T) {
	out, code, last := summarize(t, nil, fixture(t, "pass.json"))
	if code != 0 {
		t.Errorf("exit code %d, want 0\n%s", code, out)
	}
	if last != "2 passed, 0 failed, 1 skipped" {
		t.Errorf("closing line %q", last)
	}
	if strings.Contains(out, "=== Failed") {
		t.Errorf("a failed section without failures:\n%s", out)
	}
}

// TestShow: -show prints the matching output lines of any test as they
// come (here of a skipped one, whose lines are otherwise only its
// reason), and no others.
func TestShow(t *testing.T) {
	out, code, _ := summarize(t, []string{"-show", `\.go:\d+: uid `}, fixture(t, "pass.json"))
	if code != 0 {
		t.Errorf("exit code %d, want 0\n%s", code, out)
	}
	inOrder(t, out, "    d_test.go:8: uid 1000\n", "ok    example.com/fx/d", "2 passed, 0 failed, 1 skipped")
	if strings.Count(out, "uid 1000") != 1 || strings.Contains(out, "=== RUN") {
		t.Errorf("-show printed other lines, or the line twice:\n%s", out)
	}
	if _, code, _ := summarize(t, []string{"-show", "("}, nil); code != 2 {
		t.Errorf("-show with a bad expression: exit code %d, want 2", code)
	}
}

// TestBuildFailureAlone: a package that does not build fails the run
// although no test failed.
func TestBuildFailureAlone(t *testing.T) {
	var b []byte
	for _, l := range bytes.SplitAfter(fixture(t, "mixed.json"), []byte("\n")) {
		if bytes.Contains(l, []byte("example.com/fx/b")) {
			b = append(b, l...)
		}
	}
	out, code, last := summarize(t, nil, b)
	if code != 1 {
		t.Errorf("exit code %d, want 1\n%s", code, out)
	}
	if last != "0 passed, 1 failed, 0 skipped" {
		t.Errorf("closing line %q", last)
	}
}

// TestCutShort: a stream that ends before its packages do (go test
// killed) fails them.
func TestCutShort(t *testing.T) {
	var b []byte
	for _, l := range bytes.SplitAfter(fixture(t, "pass.json"), []byte("\n")) {
		if bytes.Contains(l, []byte(`"Action":"pass","Package":"example.com/fx/d","Elapsed"`)) {
			break // d's end
		}
		b = append(b, l...)
	}
	out, code, last := summarize(t, nil, b)
	if code != 1 {
		t.Errorf("exit code %d, want 1\n%s", code, out)
	}
	// d counts as one failure: it failed outside its tests.
	if !strings.Contains(out, "FAIL  example.com/fx/d (the input stopped before the package ended") || last != "2 passed, 1 failed, 1 skipped" {
		t.Errorf("want d failed and 2 passed, 1 failed, 1 skipped; got:\n%s", out)
	}
}

func TestNotJSON(t *testing.T) {
	in := append([]byte("go: downloading example.com/x v1.0.0\n{not json\n"), fixture(t, "pass.json")...)
	out, code, _ := summarize(t, nil, in)
	if code != 0 {
		t.Errorf("exit code %d", code)
	}
	inOrder(t, out, "go: downloading example.com/x v1.0.0\n", "{not json\n", "ok    example.com/fx/d")
}

// TestCommand: with a command, its exit status counts too.
func TestCommand(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
		code int
		last string
	}{
		{"passes", []string{"cat", "testdata/pass.json"}, 0, "2 passed, 0 failed, 1 skipped"},
		{"exits 2 after passing tests", []string{"sh", "-c", "cat testdata/pass.json; exit 2"}, 1, "2 passed, 0 failed, 1 skipped"},
		{"fails", []string{"cat", "testdata/mixed.json"}, 1, "6 passed, 6 failed, 3 skipped"},
		{"does not start", []string{"./testdata/no-such-command"}, 2, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, code, last := summarize(t, c.args, nil)
			if code != c.code {
				t.Errorf("exit code %d, want %d\n%s", code, c.code, out)
			}
			if c.last != "" && last != c.last {
				t.Errorf("closing line %q, want %q", last, c.last)
			}
			if c.code == 1 && c.last == "2 passed, 0 failed, 1 skipped" && !regexp.MustCompile(`testsummary: sh: exit status 2`).MatchString(out) {
				t.Errorf("the command's failure is not named:\n%s", out)
			}
		})
	}
}
