package loadgen

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/seqd/seqd/loadgen/wire"
	"github.com/seqd/seqd/verbs"
)

// The floor servers run in a process of their own, as seqd does: in
// loadgen's process their busy-polling thread would share the Go
// scheduler with the generator's, and the two would preempt each other.

// ServeFloor runs a floor server of kind ("provider-echo" or "raw-echo")
// pinned to core (-1: unpinned) with depth receives posted, prints one
// line naming it ("floor KIND ADDR QPN QKEY") to out, and serves until
// stop is closed.
func ServeFloor(kind string, core, depth int, opts string, out io.Writer, stop <-chan struct{}) error {
	k, err := wire.ParseKind(kind)
	if err != nil {
		return err
	}
	var e *wire.EchoServer
	switch k {
	case wire.ProviderEcho:
		popts, perr := verbs.ParseOptions(opts)
		if perr != nil {
			return perr
		}
		e, err = wire.StartProviderEcho(core, depth, popts)
	case wire.RawEcho:
		e, err = wire.StartRawEcho(core)
	default:
		return fmt.Errorf("%w: floor server %q", ErrConfig, kind)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "floor %s\n", e)
	<-stop
	return e.Close()
}

// floorProc is a floor server process.
type floorProc struct {
	cmd  *exec.Cmd
	in   io.WriteCloser
	done chan error
	kind wire.Kind
	addr netip.AddrPort
	qpn  uint32
	qkey uint32
}

// startFloor starts this executable as a floor server of kind.
func startFloor(ctx context.Context, c *Config, kind wire.Kind, depth int) (*floorProc, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("loadgen: floor: %w", err)
	}
	cmd := exec.Command(exe, "-"+FloorFlag, kind.String(), "-server-core", strconv.Itoa(c.ServerCore),
		"-floor-depth", strconv.Itoa(depth), "-provider-opts", c.ProviderOpts)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("loadgen: floor: %w", err)
	}
	outp, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("loadgen: floor: %w", err)
	}
	if err := unpinned(cmd.Start); err != nil {
		return nil, fmt.Errorf("loadgen: floor: %w", err)
	}
	f := &floorProc{cmd: cmd, in: in, done: make(chan error, 1), kind: kind}
	line := make(chan string, 1)
	go func() {
		s := bufio.NewScanner(outp)
		if s.Scan() {
			line <- s.Text()
		}
		close(line)
		io.Copy(io.Discard, outp)
	}()
	go func() { f.done <- cmd.Wait() }()
	var l string
	select {
	case l = <-line:
	case <-time.After(10 * time.Second):
	case <-ctx.Done():
	}
	fs := strings.Fields(l)
	if len(fs) != 5 || fs[0] != "floor" || fs[1] != kind.String() {
		f.stop()
		return nil, fmt.Errorf("loadgen: floor %v did not start (%q)", kind, l)
	}
	if f.addr, err = netip.ParseAddrPort(fs[2]); err == nil {
		var q, k uint64
		if q, err = strconv.ParseUint(fs[3], 10, 32); err == nil {
			k, err = strconv.ParseUint(fs[4], 10, 32)
		}
		f.qpn, f.qkey = uint32(q), uint32(k)
	}
	if err != nil {
		f.stop()
		return nil, fmt.Errorf("loadgen: floor %v: %q: %w", kind, l, err)
	}
	if c.ServerCore >= 0 {
		if err := pinPID(cmd.Process.Pid, c.ServerCore); err != nil {
			f.stop()
			return nil, err
		}
	}
	return f, nil
}

func (f *floorProc) pid() int { return f.cmd.Process.Pid }

func (f *floorProc) target(flows, window int) wire.Target {
	return wire.EchoTarget(f.kind, f.addr, f.qpn, f.qkey, flows, window)
}

// stop ends the server: its stdin closes, and it exits.
func (f *floorProc) stop() error {
	f.in.Close()
	select {
	case err := <-f.done:
		return err
	case <-time.After(5 * time.Second):
		f.cmd.Process.Signal(syscall.SIGKILL)
		<-f.done
		return fmt.Errorf("loadgen: floor %v did not stop; killed", f.kind)
	}
}
