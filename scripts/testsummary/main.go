// Command testsummary reads `go test -json` and says what the run does:
// one line per package as it finishes, the full output of what failed,
// and at the end every skipped test with its reason and a closing line
//
//	N passed, N failed, N skipped
//
// (tests and subtests). make test runs it:
//
//	go run ./scripts/testsummary go test -json -race ./...
//
// With a command it runs the command, reads its standard output and
// passes its standard error through; without one it reads standard input
// (go test -json ... | go run ./scripts/testsummary). It exits 1 when a
// test or a package failed, a package did not build, or the command
// failed; lines that are not JSON (go vet's, the go command's) are
// printed as they come.
//
// With -show REGEXP first, a test's output lines that match REGEXP are
// printed as they come too, whether or not the test fails: CI shows the
// storms' RIG lines this way (testsummary -show '^\s*\S+\.go:\d+: RIG ').
package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"regexp"
	"strings"
	"syscall"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	out := bufio.NewWriter(stdout)
	s := NewSummary(out)
	if len(args) >= 2 && args[0] == "-show" {
		re, err := regexp.Compile(args[1])
		if err != nil {
			fmt.Fprintln(stderr, "testsummary: -show:", err)
			return 2
		}
		s.Show = re
		args = args[2:]
	}
	var cmdErr error
	if len(args) == 0 {
		cmdErr = feed(s, stdin, out)
	} else {
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Stderr = stderr
		pipe, err := cmd.StdoutPipe()
		if err != nil {
			fmt.Fprintln(stderr, "testsummary:", err)
			return 2
		}
		if err := cmd.Start(); err != nil {
			fmt.Fprintln(stderr, "testsummary:", err)
			return 2
		}
		fmt.Fprintf(out, "testsummary: %s: a line per package as it ends; skipped tests and their reasons at the end\n", strings.Join(args, " "))
		out.Flush()
		// Ctrl-C reaches the command too (same process group); wait for
		// it to report rather than die first.
		signal.Ignore(syscall.SIGINT)
		ferr := feed(s, pipe, out)
		cmdErr = cmd.Wait()
		if cmdErr == nil {
			cmdErr = ferr
		}
	}
	failed := s.Finish()
	if cmdErr != nil {
		var exit *exec.ExitError
		if !errors.As(cmdErr, &exit) {
			fmt.Fprintln(out, "testsummary:", cmdErr)
		} else if !failed {
			// The command failed with nothing failed in its JSON: its own
			// messages (above, or on standard error) say why.
			fmt.Fprintf(out, "testsummary: %s: %v\n", args[0], cmdErr)
		}
		failed = true
	}
	s.Counts()
	if err := out.Flush(); err != nil {
		return 2
	}
	if failed {
		return 1
	}
	return 0
}

// feed hands r's lines to s, flushing out after each so that progress
// shows as it happens.
func feed(s *Summary, r io.Reader, out *bufio.Writer) error {
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 {
			s.Line(line)
			if e := out.Flush(); e != nil {
				return e
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}
