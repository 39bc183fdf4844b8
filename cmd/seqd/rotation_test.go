package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/seqd/seqd/admin/adminclient"
	"github.com/seqd/seqd/admin/adminpb"
	"github.com/seqd/seqd/internal/testpki"
)

// runMainEnv, when set to 1, makes the test binary run seqd's main with
// its arguments: the tests below start seqd as a process of its own, so
// that signals reach it as they reach the real binary.
const runMainEnv = "SEQDTEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

const (
	tokenA = "token-A-0123456789abcdef"
	tokenB = "token-B-fedcba9876543210"
)

// seqdProc is seqd running as a child process, logging JSON.
type seqdProc struct {
	cmd            *exec.Cmd
	admin, metrics string
	exited         chan struct{} // closed when the process has ended
	waitErr        error

	mu    sync.Mutex
	lines []map[string]any
	raw   strings.Builder
}

// startSeqd starts seqd with args on loopback ports of its choosing and
// returns once it serves. The test's end stops it with SIGTERM and checks
// that it shut down cleanly.
func startSeqd(t *testing.T, args ...string) *seqdProc {
	t.Helper()
	base := []string{"-data", t.TempDir(), "-init", "-admin", "127.0.0.1:0", "-metrics", "127.0.0.1:0",
		"-device", "127.0.0.1:0", "-log-format", "json"}
	cmd := exec.Command(os.Args[0], append(base, args...)...)
	cmd.Env = append(os.Environ(), runMainEnv+"=1")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &seqdProc{cmd: cmd, exited: make(chan struct{})}
	serving := make(chan struct{})
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		sc := bufio.NewScanner(stderr)
		once := sync.Once{}
		for sc.Scan() {
			var m map[string]any
			json.Unmarshal(sc.Bytes(), &m) // a line that is not JSON keeps a nil map
			p.mu.Lock()
			p.lines = append(p.lines, m)
			p.raw.WriteString(sc.Text() + "\n")
			if m["msg"] == "seqd serving" {
				p.admin, _ = m["admin"].(string)
				p.metrics, _ = m["metrics"].(string)
				once.Do(func() { close(serving) })
			}
			p.mu.Unlock()
		}
	}()
	go func() {
		<-readDone
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()
	select {
	case <-serving:
	case <-p.exited:
		t.Fatalf("seqd exited before serving: %v\n%s", p.waitErr, p.logs())
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("seqd not serving after 30s:\n%s", p.logs())
	}
	t.Cleanup(func() {
		select {
		case <-p.exited:
			return // the test reported it
		default:
		}
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			<-p.exited
			t.Errorf("seqd still running 20s after SIGTERM")
		}
		if p.waitErr != nil || p.find(func(m map[string]any) bool { return m["msg"] == "seqd shutting down" }) == 0 {
			t.Errorf("seqd did not shut down cleanly on SIGTERM: %v\n%s", p.waitErr, p.logs())
		}
	})
	return p
}

func (p *seqdProc) logs() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.raw.String()
}

// find counts the log lines for which match holds.
func (p *seqdProc) find(match func(map[string]any) bool) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, m := range p.lines {
		if m != nil && match(m) {
			n++
		}
	}
	return n
}

// waitLog waits until a log line matches, failing the test when seqd
// exits first or none comes within 30s (a bound for a loaded machine;
// the line normally comes within two seconds).
func (p *seqdProc) waitLog(t *testing.T, what string, match func(map[string]any) bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for p.find(match) == 0 {
		select {
		case <-p.exited:
			t.Fatalf("seqd exited (%v) waiting for %s:\n%s", p.waitErr, what, p.logs())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no log line for %s within 30s:\n%s", what, p.logs())
		}
	}
}

// reloaded matches the log line of a reload of secret (tokens, tls) by
// trigger (signal, file change).
func reloaded(msg, secret, trigger string) func(map[string]any) bool {
	return func(m map[string]any) bool {
		return m["msg"] == msg && m["secret"] == secret && m["trigger"] == trigger
	}
}

// hup sends SIGHUP to seqd.
func (p *seqdProc) hup(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
}

// alive fails the test if seqd has exited.
func (p *seqdProc) alive(t *testing.T) {
	t.Helper()
	select {
	case <-p.exited:
		t.Fatalf("seqd exited: %v\n%s", p.waitErr, p.logs())
	default:
	}
}

// setMode calls SetMode (to the mode seqd runs: a no-op when allowed) on
// a new connection, so that each call makes a new TLS handshake, and
// returns its code. creds nil: plaintext; token "": none.
func setMode(t *testing.T, addr string, creds credentials.TransportCredentials, token string) codes.Code {
	t.Helper()
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if creds != nil {
		opts[0] = grpc.WithTransportCredentials(creds)
	}
	if token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(adminclient.BearerToken(token, creds == nil)))
	}
	cc, err := grpc.NewClient(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = adminpb.NewAdminClient(cc).SetMode(ctx, &adminpb.SetModeRequest{Mode: "spec-s0"})
	return status.Code(err)
}

// writeSecret replaces path's contents in place, keeping mode 0600.
func writeSecret(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

func tokenFile(t *testing.T, tokens ...string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "tokens")
	writeSecret(t, p, strings.Join(tokens, "\n")+"\n")
	return p
}

// expectTokens checks that exactly the token want (of A and B) authorises
// SetMode.
func expectTokens(t *testing.T, p *seqdProc, creds credentials.TransportCredentials, want string) {
	t.Helper()
	for _, tok := range []string{tokenA, tokenB} {
		wantCode := codes.Unauthenticated
		if tok == want {
			wantCode = codes.OK
		}
		if got := setMode(t, p.admin, creds, tok); got != wantCode {
			t.Fatalf("SetMode with token %.7s: %v, want %v", tok, got, wantCode)
		}
	}
}

// TestSIGHUPRotatesToken: after the token file goes from A to B, SIGHUP
// makes seqd refuse A and accept B at once, without a restart (the same
// process serves), and SIGHUP does not stop seqd.
func TestSIGHUPRotatesToken(t *testing.T) {
	tf := tokenFile(t, tokenA)
	p := startSeqd(t, "-admin-token-file", tf)
	expectTokens(t, p, nil, tokenA)
	writeSecret(t, tf, tokenB+"\n")
	p.hup(t)
	p.waitLog(t, "the SIGHUP reload of the tokens", reloaded("secret reloaded", "tokens", "signal"))
	p.alive(t)
	expectTokens(t, p, nil, tokenB)
}

// TestTokenFileChangeRotates: replacing the token file is enough: seqd
// sees the change and from then on accepts B and refuses A.
func TestTokenFileChangeRotates(t *testing.T) {
	tf := tokenFile(t, tokenA)
	p := startSeqd(t, "-admin-token-file", tf)
	expectTokens(t, p, nil, tokenA)
	// An atomic replacement, as an operator (or Kubernetes) does it: a
	// new file renamed over the old one.
	tmp := filepath.Join(filepath.Dir(tf), "tokens.new")
	writeSecret(t, tmp, "# rotated\n"+tokenB+"\n")
	if err := os.Rename(tmp, tf); err != nil {
		t.Fatal(err)
	}
	waitAccepted(t, p, nil, tokenB)
	expectTokens(t, p, nil, tokenB)
	if p.find(reloaded("secret reloaded", "tokens", "file change")) != 1 {
		t.Errorf("the reload is not logged once as a file change:\n%s", p.logs())
	}
}

// waitAccepted waits until token authorises SetMode: seqd polls its files
// every second. It fails the test when seqd exits or 30s pass (a bound
// for a loaded machine, far above the poll's two seconds).
func waitAccepted(t *testing.T, p *seqdProc, creds credentials.TransportCredentials, token string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for setMode(t, p.admin, creds, token) != codes.OK {
		p.alive(t)
		if time.Now().After(deadline) {
			t.Fatalf("token %.7s still refused 30s after the token file changed:\n%s", token, p.logs())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// pkiFiles are a CA's files as seqd and its clients use them.
type pkiFiles struct {
	ca, serverCert, serverKey, clientCert, clientKey string
}

func newPKI(t *testing.T) pkiFiles {
	p := testpki.New(t)
	var f pkiFiles
	f.ca = p.CAFile()
	f.serverCert, f.serverKey = p.Issue(t, "seqd-server", true)
	f.clientCert, f.clientKey = p.Issue(t, "operator", false)
	return f
}

// install copies src's server files (and CA, as the client CA) over the
// paths seqd was started with: key first, then certificate, then CA.
func install(t *testing.T, dst, src pkiFiles) {
	t.Helper()
	for _, c := range [][2]string{{src.serverKey, dst.serverKey}, {src.serverCert, dst.serverCert}, {src.ca, dst.ca}} {
		b, err := os.ReadFile(c[0])
		if err != nil {
			t.Fatal(err)
		}
		writeSecret(t, c[1], string(b))
	}
}

// clientOf is a client that trusts only f's CA and presents f's operator
// certificate.
func clientOf(t *testing.T, f pkiFiles) credentials.TransportCredentials {
	t.Helper()
	c, err := adminclient.ClientTLS(adminclient.TLSConfig{CAFile: f.ca, CertFile: f.clientCert, KeyFile: f.clientKey})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestSIGHUPRotatesCert: seqd's server certificate, key and client CA
// move from CA 1 to CA 2. After SIGHUP a client that trusts only CA 2,
// with a client certificate of CA 2, is served and authorised (mTLS,
// -admin-allow operator); CA 1's client no longer connects.
func TestSIGHUPRotatesCert(t *testing.T) {
	dir := t.TempDir()
	live := pkiFiles{ca: filepath.Join(dir, "client-ca.pem"), serverCert: filepath.Join(dir, "server.pem"), serverKey: filepath.Join(dir, "server-key.pem")}
	old, neu := newPKI(t), newPKI(t)
	install(t, live, old)
	p := startSeqd(t, "-admin-tls-cert", live.serverCert, "-admin-tls-key", live.serverKey,
		"-admin-client-ca", live.ca, "-admin-allow", "operator")
	if got := setMode(t, p.admin, clientOf(t, old), ""); got != codes.OK {
		t.Fatalf("CA 1 client before the rotation: %v, want OK", got)
	}
	if got := setMode(t, p.admin, clientOf(t, neu), ""); got != codes.Unavailable {
		t.Fatalf("CA 2 client before the rotation: %v, want Unavailable (it does not trust the server)", got)
	}
	install(t, live, neu)
	p.hup(t)
	p.waitLog(t, "the SIGHUP reload of the TLS files", reloaded("secret reloaded", "tls", "signal"))
	p.alive(t)
	if got := setMode(t, p.admin, clientOf(t, neu), ""); got != codes.OK {
		t.Fatalf("CA 2 client after the rotation: %v, want OK", got)
	}
	if got := setMode(t, p.admin, clientOf(t, old), ""); got != codes.Unavailable {
		t.Fatalf("CA 1 client after the rotation: %v, want Unavailable", got)
	}
}

// TestCertFileChangeRotates: the same rotation as TestSIGHUPRotatesCert,
// with no signal: seqd notices the changed certificate, key and client CA
// files by itself (it polls them every second, and reads a change once
// the files have held still for a poll).
func TestCertFileChangeRotates(t *testing.T) {
	dir := t.TempDir()
	live := pkiFiles{ca: filepath.Join(dir, "client-ca.pem"), serverCert: filepath.Join(dir, "server.pem"), serverKey: filepath.Join(dir, "server-key.pem")}
	old, neu := newPKI(t), newPKI(t)
	install(t, live, old)
	p := startSeqd(t, "-admin-tls-cert", live.serverCert, "-admin-tls-key", live.serverKey,
		"-admin-client-ca", live.ca, "-admin-allow", "operator")
	if got := setMode(t, p.admin, clientOf(t, old), ""); got != codes.OK {
		t.Fatalf("CA 1 client before the rotation: %v, want OK", got)
	}
	install(t, live, neu)
	p.waitLog(t, "the file-change reload of the TLS files", reloaded("secret reloaded", "tls", "file change"))
	p.alive(t)
	if got := setMode(t, p.admin, clientOf(t, neu), ""); got != codes.OK {
		t.Fatalf("CA 2 client after the files changed: %v, want OK", got)
	}
	if got := setMode(t, p.admin, clientOf(t, old), ""); got != codes.Unavailable {
		t.Fatalf("CA 1 client after the files changed: %v, want Unavailable", got)
	}
}

// metric returns the value of the sample named series (name and labels,
// as the text format writes them) on seqd's /metrics, or "" if absent.
func metric(t *testing.T, p *seqdProc, series string) string {
	t.Helper()
	resp, err := http.Get("http://" + p.metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindSubmatch(body)
	if m == nil {
		return ""
	}
	return string(m[1])
}

// TestFailedReloadKeepsSecrets: a token file that lists no token and a
// certificate file that is not PEM are refused on reload: seqd logs the
// error, counts it, keeps serving with token A and the old certificate,
// and still refuses callers without a token. A later good file is taken.
func TestFailedReloadKeepsSecrets(t *testing.T) {
	dir := t.TempDir()
	live := pkiFiles{ca: filepath.Join(dir, "unused"), serverCert: filepath.Join(dir, "server.pem"), serverKey: filepath.Join(dir, "server-key.pem")}
	pki := newPKI(t)
	install(t, live, pki)
	tf := tokenFile(t, tokenA)
	p := startSeqd(t, "-admin-token-file", tf, "-admin-tls-cert", live.serverCert, "-admin-tls-key", live.serverKey)
	trust, err := adminclient.ClientTLS(adminclient.TLSConfig{CAFile: pki.ca})
	if err != nil {
		t.Fatal(err)
	}
	expectTokens(t, p, trust, tokenA)

	writeSecret(t, tf, "# all tokens removed by mistake\n")
	writeSecret(t, live.serverCert, "not a certificate\n")
	p.hup(t)
	p.waitLog(t, "the failed reload of the tokens", reloaded("secret reload failed", "tokens", "signal"))
	p.waitLog(t, "the failed reload of the TLS files", reloaded("secret reload failed", "tls", "signal"))
	p.alive(t)
	for _, s := range []string{"tokens", "tls"} {
		if v := metric(t, p, `seqd_admin_secret_reload_errors_total{secret="`+s+`"}`); v == "" || v == "0" {
			t.Errorf("seqd_admin_secret_reload_errors_total{secret=%q} = %q, want the failure counted", s, v)
		}
	}
	expectTokens(t, p, trust, tokenA) // the old certificate still verifies, A still works
	if got := setMode(t, p.admin, trust, ""); got != codes.Unauthenticated {
		t.Fatalf("SetMode without a token after the failed reload: %v, want Unauthenticated", got)
	}

	writeSecret(t, tf, tokenB+"\n")
	waitAccepted(t, p, trust, tokenB)
	expectTokens(t, p, trust, tokenB)
}

// TestMutatingCallAudited: a mutating call is logged once, by one line
// that names the method, the peer's address and the identity that asked
// (the token's fingerprint); a refused one is logged with the identity it
// presented.
func TestMutatingCallAudited(t *testing.T) {
	tf := tokenFile(t, tokenA)
	p := startSeqd(t, "-admin-token-file", tf)
	if got := setMode(t, p.admin, nil, tokenA); got != codes.OK {
		t.Fatalf("SetMode: %v", got)
	}
	// A refused call after it: once its line is read, every line the
	// allowed call wrote (before it answered) has been read too.
	if got := setMode(t, p.admin, nil, tokenB); got != codes.Unauthenticated {
		t.Fatalf("SetMode with B: %v", got)
	}
	refused := func(m map[string]any) bool { return m["msg"] == "admin call refused" }
	p.waitLog(t, "the refused call", refused)
	sum := sha256.Sum256([]byte(tokenA))
	fpA := "token:" + hex.EncodeToString(sum[:6])
	setModeLines := func(m map[string]any) bool {
		return strings.HasSuffix(fmt.Sprint(m["method"]), "/SetMode") && m["msg"] != "admin call refused"
	}
	audited := func(m map[string]any) bool {
		return setModeLines(m) && m["msg"] == "admin call" && m["code"] == "OK" &&
			strings.HasPrefix(fmt.Sprint(m["peer"]), "127.0.0.1:") && m["identity"] == fpA
	}
	if n := p.find(audited); n != 1 {
		t.Fatalf("%d audit lines with peer and identity %s for the SetMode, want 1:\n%s", n, fpA, p.logs())
	}
	if n := p.find(setModeLines); n != 1 {
		t.Fatalf("the SetMode is logged %d times with its method, want once:\n%s", n, p.logs())
	}
	sum = sha256.Sum256([]byte(tokenB))
	fpB := "token:" + hex.EncodeToString(sum[:6])
	if p.find(func(m map[string]any) bool {
		return refused(m) && strings.HasPrefix(fmt.Sprint(m["peer"]), "127.0.0.1:") && m["identity"] == fpB
	}) != 1 {
		t.Fatalf("the refused call is not logged once with its peer and identity %s:\n%s", fpB, p.logs())
	}
}
