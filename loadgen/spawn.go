package loadgen

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/seqd/seqd/admin/adminclient"
	"github.com/seqd/seqd/admin/adminpb"
)

// InProcess as Config.SeqdBinary runs seqd inside loadgen, through
// Config.InProcess (loadgen's tests; the loadgen command has none).
const InProcess = "in-process"

// Spawner starts a seqd inside this process serving mode on loopback
// (free ports, its data in dir, no receive quota), with seqd's -cores and
// -provider-opts, and returns once its admin plane answers: the admin
// address, and a stop function that returns once seqd has stopped.
// loadgen/inprocess.Spawn is one; loadgen does not import the server
// itself, so that a binary without a Spawner (the loadgen command) does
// not link it.
type Spawner func(ctx context.Context, mode, dir, cores, providerOpts string) (admin string, stop func() error, err error)

// Errors of Spawn without a seqd to start.
var (
	// ErrNoSpawner: an in-process seqd was asked for and
	// Config.InProcess is nil.
	ErrNoSpawner = errors.New("loadgen: -seqd-binary in-process: this loadgen runs no in-process seqd; name a seqd binary with -seqd-binary")
	// ErrNoSeqd: no seqd binary was named or found, and Config.InProcess
	// is nil.
	ErrNoSeqd = errors.New("loadgen: -spawn found no seqd binary")
)

// spawned is a seqd that loadgen started.
type spawned struct {
	admin string
	desc  string
	pid   int // the seqd process; 0 when in-process
	stop  func() error
}

// findSeqd returns the seqd binary to spawn: next to this executable, then
// on PATH; "" when there is none, with where it looked.
func findSeqd() (bin, looked string) {
	looked = "next to loadgen or on PATH"
	if exe, err := os.Executable(); err == nil {
		dir := filepath.Dir(exe)
		looked = "next to loadgen (in " + dir + ") or on PATH"
		p := filepath.Join(dir, "seqd")
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, looked
		}
	}
	if p, err := exec.LookPath("seqd"); err == nil {
		return p, looked
	}
	return "", looked
}

// spawn starts seqd serving mode, on loopback with free ports and a fresh
// data directory, and waits until its admin plane answers.
func spawn(ctx context.Context, c *Config, mode string) (*spawned, error) {
	bin, looked := c.SeqdBinary, ""
	if bin == "" {
		bin, looked = findSeqd()
	}
	dir, err := os.MkdirTemp("", "loadgen-seqd-")
	if err != nil {
		return nil, fmt.Errorf("loadgen: spawn: %w", err)
	}
	var s *spawned
	if bin == "" || bin == InProcess {
		s, err = spawnInProcess(ctx, c, mode, dir, bin, looked)
	} else {
		s, err = spawnBinary(ctx, c, bin, mode, dir)
	}
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	stop := s.stop
	s.stop = func() error {
		err := stop()
		os.RemoveAll(dir)
		return err
	}
	return s, nil
}

func spawnInProcess(ctx context.Context, c *Config, mode, dir, bin, looked string) (*spawned, error) {
	if c.InProcess == nil {
		if bin == "" {
			return nil, fmt.Errorf("%w %s: install seqd beside loadgen (make build puts bin/seqd there) or name it with -seqd-binary", ErrNoSeqd, looked)
		}
		return nil, ErrNoSpawner
	}
	admin, stop, err := c.InProcess(ctx, mode, dir, c.SeqdCores, c.ProviderOpts)
	if err != nil {
		return nil, fmt.Errorf("loadgen: %w", err)
	}
	return &spawned{admin: admin, desc: "in-process seqd", stop: stop}, nil
}

// lockedBuffer collects a child's stderr for error messages.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.b.Len() < 1<<20 {
		l.b.Write(p)
	}
	return len(p), nil
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

func spawnBinary(ctx context.Context, c *Config, bin, mode, dir string) (*spawned, error) {
	addr, err := freePort()
	if err != nil {
		return nil, fmt.Errorf("loadgen: spawn: free port: %w", err)
	}
	// Every client is on loopback, one peer: no receive quota (-seqd-args
	// may set one).
	args := []string{"-device", "127.0.0.1:0", "-admin", addr, "-metrics", "off", "-data", dir, "-init", "-mode", mode, "-peer-max-recv", "-1"}
	if c.SeqdCores != "" {
		args = append(args, "-cores", c.SeqdCores)
	}
	if c.ProviderOpts != "" {
		args = append(args, "-provider-opts", c.ProviderOpts)
	}
	args = append(args, c.SeqdArgs...)
	cmd := exec.Command(bin, args...)
	var errBuf lockedBuffer
	cmd.Stdout, cmd.Stderr = &errBuf, &errBuf
	if err := unpinned(cmd.Start); err != nil {
		return nil, fmt.Errorf("loadgen: spawn %s: %w", bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stop := func() error {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				return fmt.Errorf("loadgen: seqd exited: %v: %s", err, tail(errBuf.String()))
			}
			return err
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-exited
			return fmt.Errorf("loadgen: seqd did not stop on SIGTERM; killed")
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case err := <-exited:
			return nil, fmt.Errorf("loadgen: %s %v exited: %v: %s", bin, args, err, tail(errBuf.String()))
		default:
		}
		if err := ping(ctx, addr); err == nil {
			return &spawned{admin: addr, desc: bin + " (pid " + fmt.Sprint(cmd.Process.Pid) + ")", pid: cmd.Process.Pid, stop: stop}, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			stop()
			return nil, fmt.Errorf("loadgen: %s not ready after 10s: %s", bin, tail(errBuf.String()))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func ping(ctx context.Context, addr string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	cc, err := adminclient.Dial(ctx, addr)
	if err != nil {
		return err
	}
	defer cc.Close()
	_, err = adminpb.NewAdminClient(cc).Status(ctx, &adminpb.StatusRequest{})
	return err
}

func tail(s string) string {
	if len(s) > 2000 {
		s = "..." + s[len(s)-2000:]
	}
	return s
}
