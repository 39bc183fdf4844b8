package multihost

import (
	"bufio"
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/seqd/seqd/internal/netnstest"
	"github.com/seqd/seqd/loadgen/verify"
)

// The binaries every test runs, built once per test binary (without the
// race detector: they are the processes under test, not the test).
var (
	binOnce sync.Once
	binDir  string
	binErr  error
)

// TestMain removes the built binaries at the end, unless
// SEQD_RIG_KEEPBIN is set (a profiler's samples of them, perf record -a
// around a storm, need them to resolve symbols).
func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" && os.Getenv("SEQD_RIG_KEEPBIN") == "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// bin returns the path of one of the built binaries: seqd, seqctl,
// loadgen or rigclient.
func bin(t *testing.T, name string) string {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("go tool not on PATH: cannot build the binaries")
	}
	binOnce.Do(func() {
		if binDir, binErr = os.MkdirTemp("", "seqd-multihost-bin"); binErr != nil {
			return
		}
		out, err := exec.Command("go", "build", "-o", binDir+"/",
			"github.com/seqd/seqd/cmd/seqd", "github.com/seqd/seqd/cmd/seqctl",
			"github.com/seqd/seqd/cmd/loadgen", "github.com/seqd/seqd/e2e/multihost/rigclient").CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return filepath.Join(binDir, name)
}

var (
	initOnce sync.Once
	initArgs []string
)

// newDeployment is the flag a seqd on a fresh data directory needs:
// -init where seqd has it (a missing mark file stops seqd otherwise),
// nothing where it does not.
func newDeployment(t *testing.T) []string {
	seqd := bin(t, "seqd")
	initOnce.Do(func() {
		out, _ := exec.Command(seqd, "-h").CombinedOutput()
		if strings.Contains(string(out), "\n  -init\n") || strings.Contains(string(out), "\n  -init ") {
			initArgs = []string{"-init"}
		}
	})
	return initArgs
}

// mono reads CLOCK_MONOTONIC, the clock rigclient stamps its calls with.
func mono() int64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// logBuf collects a process's output.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.b.String()
	if len(s) > 3000 {
		s = "..." + s[len(s)-3000:]
	}
	return s
}

// keep writes the whole log to $SEQD_RIG_LOGS/<test>/<name>.log when
// that variable names a directory (to study a storm after the fact).
func (l *logBuf) keep(t *testing.T, name string) {
	dir := os.Getenv("SEQD_RIG_LOGS")
	if dir == "" {
		return
	}
	dir = filepath.Join(dir, strings.ReplaceAll(t.Name(), "/", "_"))
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := os.MkdirAll(dir, 0o755); err == nil {
		err = os.WriteFile(filepath.Join(dir, name+".log"), l.b.Bytes(), 0o644)
		if err != nil {
			t.Log(err)
		}
	}
}

// proc is a long-running process on a rig host.
type proc struct {
	name string
	host *netnstest.Host
	cmd  *exec.Cmd
	log  *logBuf
	done chan struct{}
}

// start runs a binary on h until the test ends (or kill).
func start(t *testing.T, h *netnstest.Host, name string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, host: h, log: &logBuf{}, done: make(chan struct{})}
	p.cmd = h.Command(name, args...)
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("%s on %s (%s) log:\n%s", filepath.Base(name), h.Name, h.Addr, p.log)
		}
		p.log.keep(t, filepath.Base(name)+"-"+h.Name)
	})
	return p
}

// kill sends SIGKILL and waits until the process is gone.
func (p *proc) kill() {
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// run runs a command on h to its end, bounded by d, and returns its
// stdout, stderr and exit code.
func run(t *testing.T, d time.Duration, h *netnstest.Host, name string, args ...string) (string, string, int) {
	t.Helper()
	cmd := h.Command(name, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	timer := time.AfterFunc(d, func() { cmd.Process.Kill() })
	err := cmd.Wait()
	timer.Stop()
	code := 0
	if err != nil {
		code = -1
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
	}
	return stdout.String(), stderr.String(), code
}

// waitFor polls cond every 50ms until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// tlsFiles is the admin plane's TLS material: a CA and a server
// certificate for every address of the rig.
type tlsFiles struct{ CA, Cert, Key string }

func makeTLS(t *testing.T) tlsFiles {
	t.Helper()
	dir := t.TempDir()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "seqd rig CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "seqd"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for ip := netnstest.Subnet.Addr(); netnstest.Subnet.Contains(ip); ip = ip.Next() {
		tmpl.IPAddresses = append(tmpl.IPAddresses, net.IP(ip.AsSlice()))
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(key)
	f := tlsFiles{CA: dir + "/ca.pem", Cert: dir + "/seqd.pem", Key: dir + "/seqd-key.pem"}
	for _, w := range []struct {
		path, typ string
		der       []byte
	}{{f.CA, "CERTIFICATE", caDER}, {f.Cert, "CERTIFICATE", der}, {f.Key, "EC PRIVATE KEY", keyDER}} {
		if err := os.WriteFile(w.path, pem.EncodeToMemory(&pem.Block{Type: w.typ, Bytes: w.der}), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// seqdArgs are the flags of a seqd serving on h: admin on :7070 and the
// data plane on :4791 of h's own address, no metrics, data in a temp dir.
// The rig's network is the test's own, so the admin plane takes
// -admin-insecure-no-auth (seqctl set-mode without a token).
func seqdArgs(t *testing.T, h *netnstest.Host, tf tlsFiles, extra ...string) []string {
	metrics := []string{"-metrics", "off"}
	if os.Getenv("SEQD_RIG_PROFILE") != "" {
		metrics = []string{"-metrics", h.HostPort(9100), "-pprof"} // profileAll
	}
	args := append([]string{"-admin", h.HostPort(7070), "-device", h.HostPort(4791),
		"-admin-tls-cert", tf.Cert, "-admin-tls-key", tf.Key, "-admin-insecure-no-auth"}, metrics...)
	args = append(args, newDeployment(t)...)
	return append(args, extra...)
}

// profileAll, with SEQD_RIG_PROFILE set to a directory, takes CPU
// profiles into it, named name-host.pprof: of d from each of hosts' seqd
// (its -pprof listener), in the background, and of each of rcs from now
// until it stops.
func profileAll(t *testing.T, hosts []*netnstest.Host, rcs []*rigClient, d time.Duration, name string) {
	dir := os.Getenv("SEQD_RIG_PROFILE")
	if dir == "" {
		return
	}
	for _, rc := range rcs {
		rc.send("profile " + filepath.Join(dir, name+"-"+rc.p.host.Name+".pprof"))
	}
	for _, h := range hosts {
		url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", h.HostPort(9100), int(d.Seconds()))
		cmd := h.Command("curl", "-s", "-o", filepath.Join(dir, name+"-"+h.Name+".pprof"), url)
		if err := cmd.Start(); err != nil {
			t.Logf("profile of %s: %v", h.Name, err)
			continue
		}
		go cmd.Wait()
	}
}

// status runs seqctl status -o json on from against admin.
func status(t *testing.T, from *netnstest.Host, tf tlsFiles, admin string) (map[string]any, error) {
	out, errOut, code := run(t, 5*time.Second, from, bin(t, "seqctl"), "-admin", admin, "-tls-ca", tf.CA, "-timeout", "1s", "status", "-o", "json")
	if code != 0 {
		return nil, fmt.Errorf("seqctl status: exit %d: %s", code, strings.TrimSpace(errOut))
	}
	var st map[string]any
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		return nil, fmt.Errorf("seqctl status: %v: %q", err, out)
	}
	return st, nil
}

// rigClient is a running rigclient: sessions of the client library on
// one host.
type rigClient struct {
	t        *testing.T
	p        *proc
	stdin    io.WriteCloser
	lines    chan string
	out      string
	sessions int
}

// startClients starts rigclient on h with n sessions against admin and
// waits until every session has been served once.
func startClients(t *testing.T, h *netnstest.Host, n int, admin string, extra ...string) *rigClient {
	t.Helper()
	rc := launchClients(t, h, n, admin, extra...)
	rc.expect("READY", 90*time.Second)
	return rc
}

// launchClients starts rigclient on h with n sessions against admin.
func launchClients(t *testing.T, h *netnstest.Host, n int, admin string, extra ...string) *rigClient {
	t.Helper()
	rc := &rigClient{t: t, lines: make(chan string, 64), out: filepath.Join(t.TempDir(), "calls"), sessions: n}
	args := append([]string{"-admin", admin, "-sessions", fmt.Sprint(n), "-out", rc.out}, extra...)
	p := &proc{name: "rigclient", host: h, log: &logBuf{}, done: make(chan struct{})}
	// The client hosts run at a lower CPU priority than the servers
	// (nice 10; SEQD_RIG_CLIENT_NICE=0 for none): on separate machines
	// a thousand clients reconnecting would not take the servers' CPU,
	// and on this rig's shared cores they starved a new leader's etcd
	// heartbeat until a standby deposed it (1 HA storm in 3).
	nice := os.Getenv("SEQD_RIG_CLIENT_NICE")
	if nice == "" {
		nice = "10"
	}
	p.cmd = h.Command("nice", append([]string{"-n", nice, bin(t, "rigclient")}, args...)...)
	p.cmd.Stderr = p.log
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if rc.stdin, err = p.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			rc.lines <- sc.Text()
		}
		close(rc.lines)
	}()
	go func() { p.cmd.Wait(); close(p.done) }()
	rc.p = p
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("rigclient on %s (%s) stderr:\n%s", h.Name, h.Addr, p.log)
		}
		p.log.keep(t, "rigclient-"+h.Name)
	})
	return rc
}

// expect waits for the next line that starts with prefix and returns it.
func (rc *rigClient) expect(prefix string, d time.Duration) string {
	rc.t.Helper()
	l, err := rc.await(prefix, d)
	if err != nil {
		rc.t.Fatal(err)
	}
	return l
}

// await is expect that returns an error instead of failing the test.
func (rc *rigClient) await(prefix string, d time.Duration) (string, error) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		select {
		case l, ok := <-rc.lines:
			if !ok {
				<-rc.p.done
				return "", fmt.Errorf("rigclient on %s exited (%v) before %s:\n%s", rc.p.host.Name, rc.p.cmd.ProcessState, prefix, rc.p.log)
			}
			if strings.HasPrefix(l, prefix) {
				return l, nil
			}
		case <-timer.C:
			return "", fmt.Errorf("rigclient on %s: no %s within %v:\n%s", rc.p.host.Name, prefix, d, rc.p.log)
		}
	}
}

func (rc *rigClient) send(line string) {
	rc.t.Helper()
	if _, err := io.WriteString(rc.stdin, line+"\n"); err != nil {
		rc.t.Fatalf("rigclient on %s: %v", rc.p.host.Name, err)
	}
}

// call is one completed call, as rigclient recorded it.
type call struct {
	session    int
	ok         bool
	start, end int64
	value      uint64
}

// stop stops the load and returns every call, by session.
func (rc *rigClient) stop() [][]call {
	rc.t.Helper()
	rc.send("stop")
	rc.expect("DONE", 60*time.Second)
	<-rc.p.done
	data, err := os.ReadFile(rc.out)
	if err != nil {
		rc.t.Fatal(err)
	}
	const size = 32
	if len(data)%size != 0 {
		rc.t.Fatalf("rigclient records: %d bytes", len(data))
	}
	bySession := make([][]call, rc.sessions)
	for b := data; len(b) > 0; b = b[size:] {
		c := call{
			session: int(binary.LittleEndian.Uint32(b[0:])),
			ok:      binary.LittleEndian.Uint32(b[4:]) == 1,
			start:   int64(binary.LittleEndian.Uint64(b[8:])),
			end:     int64(binary.LittleEndian.Uint64(b[16:])),
			value:   binary.LittleEndian.Uint64(b[24:]),
		}
		if c.session >= rc.sessions {
			rc.t.Fatalf("rigclient record of session %d of %d", c.session, rc.sessions)
		}
		bySession[c.session] = append(bySession[c.session], c)
	}
	return bySession
}

// history is the calls of every session of every host.
type history struct {
	sessions [][]call
}

func (h *history) add(s [][]call) { h.sessions = append(h.sessions, s...) }

// outcome is what check found.
type outcome struct{ calls, violations, failed int }

func (o outcome) String() string {
	return fmt.Sprintf("calls=%d violations=%d failed_calls=%d", o.calls, o.violations, o.failed)
}

// check verifies every good call of every session together and fails the
// test on a violation or on a failed call.
func (h *history) check(t *testing.T) outcome {
	t.Helper()
	var all [][]verify.Call
	failed := 0
	var firstFail call
	for _, s := range h.sessions {
		var vs []verify.Call
		for _, c := range s {
			if !c.ok {
				if failed == 0 {
					firstFail = c
				}
				failed++
				continue
			}
			vs = append(vs, verify.Call{Start: time.Duration(c.start), End: time.Duration(c.end), Value: c.value})
		}
		all = append(all, vs)
	}
	rep := verify.Check(all, 3)
	if err := rep.Err(); err != nil {
		t.Error(err)
	}
	if failed > 0 {
		t.Errorf("%d calls failed (a client gave up); the first took %v", failed, time.Duration(firstFail.end-firstFail.start))
	}
	for i, s := range h.sessions {
		if len(s) == 0 {
			t.Errorf("session %d made no call", i)
		}
	}
	return outcome{rep.Calls, rep.Violations(), failed}
}

// recovery measures, for a moment mark, when each session was served
// again: the end of its first good call that started at or after mark,
// minus mark. It returns the worst and the median over the sessions that
// were, and fails the test (once) naming how many were not.
func (h *history) recovery(t *testing.T, mark int64) (worst, median time.Duration) {
	t.Helper()
	var ds []time.Duration
	slowest, at := time.Duration(0), -1
	for i, s := range h.sessions {
		for _, c := range s {
			if c.ok && c.start >= mark {
				d := time.Duration(c.end - mark)
				ds = append(ds, d)
				if d > slowest {
					slowest, at = d, i
				}
				break
			}
		}
	}
	if at >= 0 {
		t.Logf("RIG slowest session: #%d of %d (in the order the clients were started), served again %v after the mark", at, len(h.sessions), slowest.Round(time.Millisecond))
		var cs []string
		for _, c := range h.sessions[at] {
			if c.end > mark-int64(time.Second) && c.start < mark+int64(slowest)+int64(time.Second) {
				cs = append(cs, fmt.Sprintf("[%v, %v]%s", time.Duration(c.start-mark).Round(time.Millisecond),
					time.Duration(c.end-mark).Round(time.Millisecond), map[bool]string{true: "", false: " failed"}[c.ok]))
			}
		}
		t.Logf("RIG slowest session's calls around the mark (start, end after it): %s", strings.Join(cs, " "))
	}
	if len(ds) < len(h.sessions) {
		t.Errorf("%d of %d sessions not served again after the mark", len(h.sessions)-len(ds), len(h.sessions))
	}
	if len(ds) == 0 {
		return 0, 0
	}
	slices.Sort(ds)
	return ds[len(ds)-1], ds[len(ds)/2]
}

// resumed measures, for a moment mark, when each session got an answer
// again: the end of its first good call that ended after mark (one
// issued before mark and answered after it counts: a session waiting on
// a call is served by that call's answer, not only by the next call,
// which rigclient paces up to 1.5 s later). It returns the earliest
// (the first answer at all after mark, on a failover the new leader's
// first), the worst and the median, each minus mark.
func (h *history) resumed(mark int64) (first, worst, median time.Duration) {
	var ds []time.Duration
	for _, s := range h.sessions {
		for _, c := range s {
			if c.ok && c.end > mark {
				ds = append(ds, time.Duration(c.end-mark))
				break
			}
		}
	}
	if len(ds) == 0 {
		return 0, 0, 0
	}
	slices.Sort(ds)
	return ds[0], ds[len(ds)-1], ds[len(ds)/2]
}

// longestWait is the longest any good call waited across a moment
// mark: over the calls answered after mark, the most time from mark, or
// from the call's start when later, to its answer. Unlike resumed it
// leaves out the time sessions spent not calling (rigclient's pause).
func (h *history) longestWait(mark int64) time.Duration {
	var w int64
	for _, s := range h.sessions {
		for _, c := range s {
			if c.ok && c.end > mark {
				w = max(w, c.end-max(c.start, mark))
			}
		}
	}
	return time.Duration(w)
}
