package oracle_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/seqd/seqd/oracle"
	"github.com/seqd/seqd/spec"
)

// Environment of the helper process in TestKill9Restart.
const (
	crashDirEnv    = "SEQD_ORACLE_CRASH_DIR"
	crashFormatEnv = "SEQD_ORACLE_CRASH_FORMAT"
	crashClockEnv  = "SEQD_ORACLE_CRASH_CLOCK" // frozen Unix ms for hybrid
	crashSeedEnv   = "SEQD_ORACLE_CRASH_SEED"
)

// TestKill9Restart runs a helper process that claims values in a loop and
// writes each batch to a pipe, SIGKILLs it at random points, and restarts
// it on the same data directory. The first value after each restart must be
// above every value served before, and the mark file must cover them all.
//
// Small windows make the helper save a mark every few claims, so the kills
// land before, during and after saves. The hybrid runs freeze the clock, so
// only the persisted mark (not the passing of time) keeps values apart.
func TestKill9Restart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts helper processes")
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 9))
	for _, format := range []spec.Format{spec.FormatCounter, spec.FormatHybrid} {
		t.Run(format.String(), func(t *testing.T) {
			dir := t.TempDir()
			var maxSeen uint64
			for run := range 6 {
				// Hybrid saves every 1<<17 values, about 4000 batches.
				killAfter := rng.IntN(map[spec.Format]int{spec.FormatCounter: 2000, spec.FormatHybrid: 12000}[format])
				if run == 0 {
					killAfter = 0 // likely inside Open
				}
				first, last, lines := runCrashChild(t, dir, format, rng.Uint64(), killAfter)
				if lines > 0 && first <= maxSeen {
					t.Fatalf("run %d: first value %d is not above %d, served before the kill", run, first, maxSeen)
				}
				t.Logf("run %d: killed after %d lines (asked %d): first %d, last %d", run, lines, killAfter, first, last)
				maxSeen = max(maxSeen, last)
			}
			s, err := oracle.OpenFileStore(dir)
			if err != nil {
				t.Fatal(err)
			}
			m, err := s.Load(context.Background())
			if err != nil || m < maxSeen {
				t.Fatalf("persisted mark %d, %v; want at least %d", m, err, maxSeen)
			}
		})
	}
}

// runCrashChild runs one helper until it has written killAfter lines, kills
// it with SIGKILL, reads what it wrote before dying, and returns the first
// and last values served and the number of batches.
func runCrashChild(t *testing.T, dir string, format spec.Format, seed uint64, killAfter int) (first, last uint64, lines int) {
	t.Helper()
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashHelper$", "-test.count=1")
	cmd.Env = append(os.Environ(),
		crashDirEnv+"="+dir,
		crashFormatEnv+"="+format.String(),
		crashClockEnv+"="+strconv.FormatInt(T0, 10),
		crashSeedEnv+"="+strconv.FormatUint(seed, 10))
	cmd.ExtraFiles = []*os.File{pw} // fd 3 in the helper
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	killed := false
	kill := func() {
		if !killed {
			cmd.Process.Signal(syscall.SIGKILL)
			killed = true
		}
	}
	defer kill()
	if killAfter == 0 {
		kill()
	}
	r := bufio.NewReader(pr)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			break // EOF once the helper is dead; a partial line was not served
		}
		var f, n uint64
		if _, err := fmt.Sscanf(line, "%d %d\n", &f, &n); err != nil || n == 0 {
			kill()
			t.Fatalf("helper wrote %q: %v", line, err)
		}
		if lines > 0 && f <= last {
			kill()
			t.Fatalf("helper served %d after %d", f, last)
		}
		if lines == 0 {
			first = f
		}
		last = f + n - 1
		lines++
		if lines == killAfter {
			kill()
		}
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("helper did not die of SIGKILL: %v\n%s", err, stderr.String())
	}
	return first, last, lines
}

// TestCrashHelper is the helper process of TestKill9Restart; it does
// nothing in a normal test run.
func TestCrashHelper(t *testing.T) {
	dir := os.Getenv(crashDirEnv)
	if dir == "" {
		t.Skip("helper process for TestKill9Restart")
	}
	format, err := spec.ParseFormat(os.Getenv(crashFormatEnv))
	if err != nil {
		t.Fatal(err)
	}
	frozen, _ := strconv.ParseInt(os.Getenv(crashClockEnv), 10, 64)
	seed, _ := strconv.ParseUint(os.Getenv(crashSeedEnv), 10, 64)
	rng := rand.New(rand.NewPCG(seed, 3))
	out := os.NewFile(3, "values")
	// A bound in case the parent never kills us.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	o, err := oracle.Open(ctx, oracle.Config{
		Format:        format,
		Dir:           dir,
		Init:          true,             // a kill inside run 0's Open can leave no mark file; Init never overrides one
		HybridWindow:  time.Millisecond, // 1<<18 values
		CounterWindow: 256,
		MaxBatch:      64,
		Clock:         func() int64 { return frozen },
		Logger:        quiet,
	})
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 0, 64)
	for ctx.Err() == nil {
		n := 1 + rng.IntN(64)
		first, err := o.ClaimWait(ctx, n)
		if err != nil {
			t.Fatal(err)
		}
		buf = strconv.AppendUint(buf[:0], first, 10)
		buf = append(buf, ' ')
		buf = strconv.AppendUint(buf, uint64(n), 10)
		buf = append(buf, '\n')
		if _, err := out.Write(buf); err != nil {
			t.Fatal(err) // the parent went away
		}
	}
}
