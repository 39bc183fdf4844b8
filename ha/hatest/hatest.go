// Package hatest starts real etcd clusters for tests: members run the etcd
// binary (Debian's etcd-server package, or $SEQD_ETCD) on free loopback
// ports, and tests can kill, pause and restart them. Tests skip with a
// clear reason when the binary is missing.
package hatest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Binary returns the etcd binary: $SEQD_ETCD, else etcd on $PATH, else
// /usr/bin/etcd.
func Binary() (string, error) {
	if p := os.Getenv("SEQD_ETCD"); p != "" {
		return p, nil
	}
	if p, err := exec.LookPath("etcd"); err == nil {
		return p, nil
	}
	if _, err := os.Stat("/usr/bin/etcd"); err == nil {
		return "/usr/bin/etcd", nil
	}
	return "", errors.New("hatest: no etcd binary (install the etcd-server package or set SEQD_ETCD)")
}

// Member is one etcd process.
type Member struct {
	Name      string
	ClientURL string
	PeerURL   string
	Dir       string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// Cluster is a running etcd cluster.
type Cluster struct {
	t       testing.TB
	bin     string
	Members []*Member
	initial string
}

// Start starts an n-member cluster and waits until it answers. It skips t
// when etcd is missing and fails t when the cluster does not come up.
func Start(t testing.TB, n int) *Cluster {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		t.Skip(err.Error())
	}
	ports := FreePorts(t, 2*n)
	c := &Cluster{t: t, bin: bin}
	dir := t.TempDir()
	var initial []string
	for i := range n {
		m := &Member{
			Name:      fmt.Sprintf("m%d", i),
			ClientURL: fmt.Sprintf("http://127.0.0.1:%d", ports[2*i]),
			PeerURL:   fmt.Sprintf("http://127.0.0.1:%d", ports[2*i+1]),
			Dir:       filepath.Join(dir, fmt.Sprintf("m%d", i)),
		}
		c.Members = append(c.Members, m)
		initial = append(initial, m.Name+"="+m.PeerURL)
	}
	c.initial = strings.Join(initial, ",")
	t.Cleanup(c.stopAll)
	for i := range c.Members {
		if err := c.start(i, "new"); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.WaitReady(ctx, c.Endpoints()...); err != nil {
		t.Fatalf("hatest: etcd cluster did not come up: %v\n%s", err, c.Logs())
	}
	return c
}

// FreePorts returns n distinct free TCP ports on 127.0.0.1.
func FreePorts(t testing.TB, n int) []int {
	t.Helper()
	var ls []net.Listener
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("hatest: free port: %v", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		l.Close()
	}
	return ports
}

func (c *Cluster) start(i int, state string) error {
	m := c.Members[i]
	if err := os.MkdirAll(m.Dir, 0o755); err != nil {
		return err
	}
	log, err := os.OpenFile(filepath.Join(m.Dir, "etcd.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(c.bin,
		"--name", m.Name,
		"--data-dir", filepath.Join(m.Dir, "data"),
		"--listen-client-urls", m.ClientURL,
		"--advertise-client-urls", m.ClientURL,
		"--listen-peer-urls", m.PeerURL,
		"--initial-advertise-peer-urls", m.PeerURL,
		"--initial-cluster", c.initial,
		"--initial-cluster-state", state,
		"--initial-cluster-token", "seqd-hatest",
		"--heartbeat-interval", "50",
		"--election-timeout", "500",
		"--logger", "zap",
		"--log-outputs", "stderr",
	)
	cmd.Stdout = log
	cmd.Stderr = log
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("hatest: start etcd %s: %w", m.Name, err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); log.Close(); close(done) }()
	m.mu.Lock()
	m.cmd, m.done = cmd, done
	m.mu.Unlock()
	return nil
}

// Endpoints are the client URLs of every member.
func (c *Cluster) Endpoints() []string {
	var eps []string
	for _, m := range c.Members {
		eps = append(eps, m.ClientURL)
	}
	return eps
}

// Kill kills member i with SIGKILL and waits for it to exit.
func (c *Cluster) Kill(i int) {
	m := c.Members[i]
	m.mu.Lock()
	cmd, done := m.cmd, m.done
	m.cmd = nil
	m.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(syscall.SIGCONT) // a stopped process must run to die
	cmd.Process.Kill()
	<-done
}

// Pause stops member i with SIGSTOP; Resume continues it.
func (c *Cluster) Pause(i int)  { c.signal(i, syscall.SIGSTOP) }
func (c *Cluster) Resume(i int) { c.signal(i, syscall.SIGCONT) }

func (c *Cluster) signal(i int, s syscall.Signal) {
	m := c.Members[i]
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd != nil {
		m.cmd.Process.Signal(s)
	}
}

// Restart starts a killed member i again on its data directory.
func (c *Cluster) Restart(i int) error {
	m := c.Members[i]
	m.mu.Lock()
	running := m.cmd != nil
	m.mu.Unlock()
	if running {
		return fmt.Errorf("hatest: member %s is running", m.Name)
	}
	return c.start(i, "existing")
}

func (c *Cluster) stopAll() {
	for i := range c.Members {
		c.Kill(i)
	}
}

// WaitReady waits until a linearizable read succeeds through each of
// endpoints.
func (c *Cluster) WaitReady(ctx context.Context, endpoints ...string) error {
	for _, ep := range endpoints {
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, DialTimeout: time.Second, Logger: zap.NewNop()})
		if err != nil {
			return err
		}
		for {
			rctx, cancel := context.WithTimeout(ctx, time.Second)
			_, err = cli.Get(rctx, "/hatest/ready")
			cancel()
			if err == nil {
				break
			}
			select {
			case <-ctx.Done():
				cli.Close()
				return fmt.Errorf("%s: %w (last error: %v)", ep, ctx.Err(), err)
			case <-time.After(50 * time.Millisecond):
			}
		}
		cli.Close()
	}
	return nil
}

// Client returns a client over every member, closed at the end of the
// test.
func (c *Cluster) Client() *clientv3.Client {
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: time.Second, Logger: zap.NewNop()})
	if err != nil {
		c.t.Fatalf("hatest: client: %v", err)
	}
	c.t.Cleanup(func() { cli.Close() })
	return cli
}

// Logs returns the tail of every member's log, for failure messages.
func (c *Cluster) Logs() string {
	var b strings.Builder
	for _, m := range c.Members {
		data, _ := os.ReadFile(filepath.Join(m.Dir, "etcd.log"))
		if len(data) > 2000 {
			data = data[len(data)-2000:]
		}
		fmt.Fprintf(&b, "--- %s ---\n%s\n", m.Name, data)
	}
	return b.String()
}
