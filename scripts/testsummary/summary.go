package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strings"
)

// event is one line of `go test -json`: a test2json TestEvent, or a
// build event of the go command (Action build-output or build-fail,
// ImportPath set).
type event struct {
	Action      string
	Package     string
	Test        string
	Elapsed     float64
	Output      string
	FailedBuild string
	ImportPath  string
}

// test is what one test (or subtest) printed and how it ended.
type test struct {
	name   string
	seq    int // order of its first event in its package
	out    strings.Builder
	action string // pass, fail, skip; "" while it runs
}

// pkg is one package's run: its tests and its own output.
type pkg struct {
	name  string
	out   strings.Builder // package-level output (Test == "")
	tests map[string]*test
	next  int
	// passed and skipped count its tests that passed and were skipped.
	passed, skipped int
}

// result is a finished test that the closing summary lists.
type result struct {
	pkg, test, text string
}

// Summary turns `go test -json` lines into the progress lines and the
// closing summary, written to w. It holds a package's output until the
// package ends, and then only what failed and the skip reasons.
type Summary struct {
	w        io.Writer
	pkgs     map[string]*pkg
	builds   map[string]*strings.Builder // build output by ImportPath
	passed   int
	failed   []result
	skipped  []result
	pkgFails int // packages that failed (a build, a panic outside a test, a timeout)
	// Show, when set, picks test output lines to print as they come.
	Show *regexp.Regexp
}

// NewSummary returns a Summary that writes to w.
func NewSummary(w io.Writer) *Summary {
	return &Summary{w: w, pkgs: map[string]*pkg{}, builds: map[string]*strings.Builder{}}
}

// Line takes one line of input. A line that is not a JSON event is
// printed as it is.
func (s *Summary) Line(line []byte) {
	trimmed := bytes.TrimSpace(line)
	var e event
	if len(trimmed) == 0 || trimmed[0] != '{' || json.Unmarshal(trimmed, &e) != nil || e.Action == "" {
		s.w.Write(line)
		if len(line) > 0 && line[len(line)-1] != '\n' {
			io.WriteString(s.w, "\n")
		}
		return
	}
	s.event(e)
}

func (s *Summary) event(e event) {
	switch e.Action {
	case "build-output":
		b := s.builds[e.ImportPath]
		if b == nil {
			b = &strings.Builder{}
			s.builds[e.ImportPath] = b
		}
		b.WriteString(e.Output)
		return
	case "build-fail":
		// Reported with the package's fail event (FailedBuild).
		return
	}
	p := s.pkgs[e.Package]
	if p == nil {
		p = &pkg{name: e.Package, tests: map[string]*test{}}
		s.pkgs[e.Package] = p
	}
	if e.Test == "" {
		switch e.Action {
		case "output":
			p.out.WriteString(e.Output)
		case "pass", "fail", "skip":
			s.endPackage(p, e, false)
			delete(s.pkgs, e.Package)
		}
		return
	}
	t := p.tests[e.Test]
	if t == nil {
		t = &test{name: e.Test, seq: p.next}
		p.next++
		p.tests[e.Test] = t
	}
	switch e.Action {
	case "output":
		t.out.WriteString(e.Output)
		if s.Show != nil && s.Show.MatchString(e.Output) {
			io.WriteString(s.w, e.Output)
		}
	case "pass":
		s.passed++
		p.passed++
		delete(p.tests, e.Test) // its output is not needed
	case "skip":
		s.skipped = append(s.skipped, result{p.name, e.Test, skipReason(t.out.String())})
		p.skipped++
		delete(p.tests, e.Test)
	case "fail":
		t.action = "fail"
		s.failed = append(s.failed, result{p.name, e.Test, messages(t.out.String())})
	}
}

// endPackage prints the package's line and, when it failed, the output
// of its failed tests, of the tests it did not finish, and its own.
// cut says the input stopped before the package ended.
func (s *Summary) endPackage(p *pkg, e event, cut bool) {
	var nfail, unfinished int
	for _, t := range p.tests {
		if t.action == "fail" {
			nfail++
		} else if t.action == "" {
			unfinished++
		}
	}
	switch {
	case e.Action == "pass":
		fmt.Fprintf(s.w, "ok    %s %.1fs (%d passed, %d skipped)\n", p.name, e.Elapsed, p.passed, p.skipped)
		return
	case e.Action == "skip":
		fmt.Fprintf(s.w, "?     %s [no test files]\n", p.name)
		return
	}
	s.pkgFails++
	if e.FailedBuild != "" {
		fmt.Fprintf(s.w, "FAIL  %s [build failed: %s]\n", p.name, e.FailedBuild)
		if b := s.builds[e.FailedBuild]; b != nil {
			io.WriteString(s.w, b.String())
		}
		fmt.Fprint(s.w, p.out.String())
		s.failed = append(s.failed, result{p.name, "", "build failed: " + firstLines(s.builds[e.FailedBuild], 10)})
		return
	}
	if cut {
		fmt.Fprintf(s.w, "FAIL  %s (the input stopped before the package ended: %d failed, %d did not finish)\n", p.name, nfail, unfinished)
	} else {
		fmt.Fprintf(s.w, "FAIL  %s %.1fs (%d failed, %d did not finish)\n", p.name, e.Elapsed, nfail, unfinished)
	}
	ts := make([]*test, 0, len(p.tests))
	for _, t := range p.tests {
		ts = append(ts, t)
	}
	sort.Slice(ts, func(i, j int) bool { return ts[i].seq < ts[j].seq })
	for _, t := range ts {
		io.WriteString(s.w, t.out.String())
		if t.action == "" {
			s.failed = append(s.failed, result{p.name, t.name, "did not finish\n" + messages(t.out.String())})
		}
	}
	io.WriteString(s.w, p.out.String())
	if nfail == 0 && unfinished == 0 {
		// A failure outside any test: a panic in init or TestMain, a race
		// after the tests, an exit.
		msg := messages(p.out.String())
		if cut {
			msg = "the input stopped before the package ended\n" + msg
		}
		s.failed = append(s.failed, result{p.name, "", msg})
	}
}

// Finish ends the input: packages without an end (the command stopped)
// count as failed. It prints the skipped and failed tests and reports
// whether anything failed.
func (s *Summary) Finish() bool {
	names := make([]string, 0, len(s.pkgs))
	for n := range s.pkgs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		s.endPackage(s.pkgs[n], event{Action: "fail", Package: n}, true)
	}
	s.pkgs = map[string]*pkg{}
	if len(s.skipped) > 0 {
		fmt.Fprintf(s.w, "\n=== Skipped (%d):\n", len(s.skipped))
		for _, r := range s.skipped {
			fmt.Fprintf(s.w, "SKIP  %s %s: %s\n", r.pkg, r.test, r.text)
		}
	}
	if len(s.failed) > 0 {
		fmt.Fprintf(s.w, "\n=== Failed (%d), their messages without log lines (the full output is above):\n", len(s.failed))
		for _, r := range s.failed {
			name := r.test
			if name == "" {
				name = "(package)"
			}
			fmt.Fprintf(s.w, "FAIL  %s %s\n", r.pkg, name)
			for _, l := range strings.Split(strings.TrimRight(r.text, "\n"), "\n") {
				if l != "" {
					fmt.Fprintf(s.w, "      %s\n", l)
				}
			}
		}
	}
	return len(s.failed) > 0 || s.pkgFails > 0
}

// Counts prints the closing line.
func (s *Summary) Counts() {
	fmt.Fprintf(s.w, "\n%d passed, %d failed, %d skipped\n", s.passed, s.testFails(), len(s.skipped))
}

// testFails counts the failed tests, and a package that failed outside
// its tests (a build, a panic, a timeout) as one.
func (s *Summary) testFails() int { return len(s.failed) }

var (
	// goSource is the prefix t.Log, t.Skip and t.Error put on a message.
	goSource = regexp.MustCompile(`^\s*[\w.-]+\.go:\d+: `)
	// logLine is a line of a log the code under test writes: slog's text
	// and JSON handlers, the standard logger's date, zap's bracketed time.
	logLine = regexp.MustCompile(`(^|\s)(time=\S+ level=|level=[A-Z]+ msg=)|^\s*\{"time":|^\s*\d{4}/\d\d/\d\d \d\d:\d\d:\d\d|^\s*\[\d{4}/\d\d/\d\d `)
	// framing is what go test adds around a test's own output.
	framing = regexp.MustCompile(`^\s*(=== (RUN|PAUSE|CONT|NAME)|--- (PASS|FAIL|SKIP)):? |^(PASS|FAIL|ok)(\s|$)`)
)

// skipReason is what a skipped test said last: from its last t.Skip or
// t.Log line (the file:line prefix) to the end, without go test's lines.
func skipReason(out string) string {
	lines := ownLines(out)
	start := 0
	for i, l := range lines {
		if goSource.MatchString(l) {
			start = i
		}
	}
	lines = lines[start:]
	for i, l := range lines {
		lines[i] = strings.TrimSpace(l)
	}
	if len(lines) == 0 {
		return "(no reason given)"
	}
	return strings.Join(lines, " ")
}

// messages is a failed test's output without go test's lines and the
// log lines of the code under test, the last 40 lines at most.
func messages(out string) string {
	lines := ownLines(out)
	kept := lines[:0]
	for _, l := range lines {
		if !logLine.MatchString(l) {
			kept = append(kept, l)
		}
	}
	if len(kept) > 40 {
		kept = append([]string{fmt.Sprintf("... (%d lines before)", len(kept)-40)}, kept[len(kept)-40:]...)
	}
	return strings.Join(kept, "\n")
}

// ownLines splits out into lines, without go test's framing lines and
// blank lines.
func ownLines(out string) []string {
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if strings.TrimSpace(l) == "" || framing.MatchString(l) {
			continue
		}
		lines = append(lines, l)
	}
	return lines
}

func firstLines(b *strings.Builder, n int) string {
	if b == nil {
		return "(no build output)"
	}
	lines := strings.Split(strings.TrimRight(b.String(), "\n"), "\n")
	if len(lines) > n {
		lines = append(lines[:n], "...")
	}
	return strings.Join(lines, "\n")
}
