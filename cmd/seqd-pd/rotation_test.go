package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	pd "github.com/tikv/pd/client"

	seqdrun "github.com/seqd/seqd/server"
)

// runMainEnv, when set to 1, makes the test binary run seqd-pd's main
// with its arguments, so that a test sends it real signals.
const runMainEnv = "SEQDPDTEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

const (
	pdTokenA = "pd-token-A-0123456789abcdef"
	pdTokenB = "pd-token-B-fedcba9876543210"
)

func putFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

// counter reads a sample off a /metrics page; -1 when absent.
func counter(t *testing.T, addr, series string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindSubmatch(body)
	if m == nil {
		return -1
	}
	v, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestSIGHUPRotatesToken: seqd-pd, a process of its own, follows a
// rotation of the token seqd requires for admission and leases
// (-admin-protect-connect): seqd accepts A and B, seqd-pd's file goes
// to B and SIGHUP reloads it (seqd-pd keeps serving), seqd drops A, and
// seqd-pd's session is still renewed (KeepAlive authorised) and serves
// PD's client.
func TestSIGHUPRotatesToken(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir := t.TempDir()
	seqdTokens, pdToken := filepath.Join(dir, "seqd-tokens"), filepath.Join(dir, "pd-token")
	putFile(t, seqdTokens, pdTokenA+"\n")
	putFile(t, pdToken, pdTokenA+"\n")
	seqdHup := make(chan os.Signal)
	ready := make(chan seqdrun.Addrs, 1)
	seqdDone := make(chan error, 1)
	go func() {
		seqdDone <- seqdrun.Run(ctx, seqdrun.Config{Device: "127.0.0.1:0", Admin: "127.0.0.1:0", Metrics: "127.0.0.1:0",
			Data: t.TempDir(), Init: true, Mode: "fasst", SessionLease: 600 * time.Millisecond,
			Security: seqdrun.SecurityConfig{TokenFile: seqdTokens, ProtectConnect: true, Reload: seqdHup, ReloadInterval: time.Hour}},
			slog.New(slog.DiscardHandler), func(a seqdrun.Addrs) { ready <- a })
	}()
	var seqd seqdrun.Addrs
	select {
	case seqd = <-ready:
	case err := <-seqdDone:
		t.Fatal(err)
	}
	defer func() {
		cancel()
		<-seqdDone
	}()
	seqdReload := func() {
		t.Helper()
		select {
		case seqdHup <- syscall.SIGHUP: // unbuffered: seqd has taken it
		case err := <-seqdDone:
			t.Fatalf("seqd: %v", err)
		}
	}

	cmd := exec.Command(os.Args[0], "-listen", "127.0.0.1:0", "-admin", seqd.Admin, "-metrics", "off",
		"-token-file", pdToken, "-log-format", "json")
	cmd.Env = append(os.Environ(), runMainEnv+"=1")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var logs []map[string]any
	listening := make(chan string, 1)
	exited := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var m map[string]any
			json.Unmarshal(sc.Bytes(), &m)
			mu.Lock()
			logs = append(logs, m)
			mu.Unlock()
			if m["msg"] == "seqd-pd serving" {
				listening <- m["listen"].(string)
			}
		}
		cmd.Wait()
		close(exited)
	}()
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		<-exited
	}()
	alive := func() {
		t.Helper()
		select {
		case <-exited:
			t.Fatalf("seqd-pd exited: %v", cmd.ProcessState)
		default:
		}
	}
	var addr string
	select {
	case addr = <-listening:
	case <-exited:
		t.Fatalf("seqd-pd exited before serving: %v", cmd.ProcessState)
	case <-time.After(30 * time.Second):
		t.Fatal("seqd-pd not serving after 30s")
	}
	c, err := pd.NewClientWithContext(ctx, []string{addr}, pd.SecurityOption{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	getTS := func() {
		t.Helper()
		for range 10 {
			if _, _, err := c.GetTS(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	getTS()

	putFile(t, seqdTokens, pdTokenA+"\n"+pdTokenB+"\n")
	seqdReload()
	putFile(t, pdToken, pdTokenB+"\n")
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		n := 0
		for _, m := range logs {
			if m["msg"] == "secret reloaded" && m["secret"] == "token" && m["trigger"] == "signal" {
				n++
			}
		}
		mu.Unlock()
		if n > 0 {
			break
		}
		alive()
		if time.Now().After(deadline) {
			t.Fatal("seqd-pd did not log the reload of its token within 30s of SIGHUP")
		}
		time.Sleep(20 * time.Millisecond)
	}
	alive()
	putFile(t, seqdTokens, pdTokenB+"\n")
	seqdReload()
	// KeepAlives (every 200ms) authorised from now on used B: wait for
	// two of them.
	allowed := `seqd_admin_auth_total{type="allowed"}`
	base := counter(t, seqd.Metrics, allowed)
	deadline = time.Now().Add(30 * time.Second)
	for counter(t, seqd.Metrics, allowed) < base+2 {
		alive()
		if time.Now().After(deadline) {
			t.Fatalf("no KeepAlive of seqd-pd authorised within 30s of dropping token A (%s)", allowed)
		}
		time.Sleep(50 * time.Millisecond)
	}
	getTS()
	alive()
}
