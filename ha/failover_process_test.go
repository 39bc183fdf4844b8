package ha_test

import (
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/seqd/seqd/admin/adminclient"
	"github.com/seqd/seqd/ha/hatest"
	"github.com/seqd/seqd/loadgen/verify"
)

// etcdProxy forwards TCP connections to one etcd member and can cut them
// off: while cut it forwards nothing in either direction and holds new
// connections, without closing or resetting any (a black hole, as a
// network partition is; bytes held are delivered when it heals, as TCP
// retransmits after a partition heals). Each seqd instance reaches etcd
// through proxies of its own, so that one instance can be partitioned
// from etcd while its clients still reach it.
type etcdProxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	cond  *sync.Cond
	cut   bool
	conns []net.Conn
}

func startEtcdProxy(t *testing.T, target string) *etcdProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &etcdProxy{ln: ln, target: strings.TrimPrefix(target, "http://")}
	p.cond = sync.NewCond(&p.mu)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *etcdProxy) url() string { return "http://" + p.ln.Addr().String() }

func (p *etcdProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go func() {
			p.waitOpen()
			up, err := net.Dial("tcp", p.target)
			if err != nil {
				c.Close()
				return
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			go p.pipe(up, c)
			go p.pipe(c, up)
		}()
	}
}

// pipe copies src to dst, holding what it read while the proxy is cut.
func (p *etcdProxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.waitOpen()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	dst.Close()
	src.Close()
}

func (p *etcdProxy) waitOpen() {
	p.mu.Lock()
	for p.cut {
		p.cond.Wait()
	}
	p.mu.Unlock()
}

func (p *etcdProxy) setCut(cut bool) {
	p.mu.Lock()
	p.cut = cut
	p.cond.Broadcast()
	p.mu.Unlock()
}

func (p *etcdProxy) close() {
	p.ln.Close()
	p.setCut(false)
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
}

// procCall is one successful call and the instance the client was
// connected to when it returned.
type procCall struct {
	verify.Call
	endpoint string
}

// firstFrom returns the first call after at answered while its client was
// connected to another instance than old: the new leader's first value as
// the clients see it.
func (l *clientLoad) firstFrom(old string, at time.Duration) (procCall, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var first procCall
	ok := false
	for _, c := range l.calls {
		if c.endpoint != old && c.End > at && (!ok || c.End < first.End) {
			first, ok = c, true
		}
	}
	return first, ok
}

// lateBelow counts the calls that started after first ended yet got a
// smaller value: an old leader serving after its successor did (the
// verifier rejects them too; counted here for the report).
func (l *clientLoad) lateBelow(first procCall) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, c := range l.calls {
		if c.Start > first.End && c.Value < first.Value {
			n++
		}
	}
	return n
}

// TestSeqdFastFailover runs three seqd processes (the real binary, with
// the default serving lease) on a real 3-member etcd, each reaching etcd
// through proxies of its own, under load from client-library clients
// that know every instance, and repeats three faults of the leader: kill
// -9 (restarted on the same address afterwards), SIGSTOP (SIGCONT after
// the failover) and a partition from etcd (its proxies cut; healed after
// the failover) in which clients still reach it. Per fault it logs the
// distribution of the time from the fault to the first value a client
// got from another instance (SEQD_TEST_FAILOVER_TRIALS trials), and checks
// every call with the verifier, and that no call got a value below the
// new leader's first after it had returned.
func TestSeqdFastFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("runs seqd and etcd processes; skipped in -short")
	}
	c := hatest.Start(t, 3)
	bin := buildSeqd(t)
	n := trials(t)
	for _, fault := range []string{"kill-9", "sigstop", "etcd-partition"} {
		t.Run(fault, func(t *testing.T) {
			prefix := "/" + t.Name()
			var ps []*seqdProc
			var proxies [][]*etcdProxy
			var eps [][]string
			var addrs []string
			for range 3 {
				var px []*etcdProxy
				var ep []string
				for _, m := range c.Endpoints() {
					p := startEtcdProxy(t, m)
					px = append(px, p)
					ep = append(ep, p.url())
				}
				proc := startSeqd(t, bin, ep, prefix)
				ps, proxies, eps, addrs = append(ps, proc), append(proxies, px), append(eps, ep), append(addrs, proc.addr)
			}
			seqdLeader(t, ps, nil, 15*time.Second)
			l := startClientLoad(t, addrs, 8)
			l.waitCalls(t, 300, 10*time.Second)
			var ds []time.Duration
			violations := 0
			for i := range n {
				lead := seqdLeader(t, ps, nil, failoverWithin)
				li := slices.Index(ps, lead)
				l.waitCalls(t, 100, failoverWithin)
				at := l.now()
				switch fault {
				case "kill-9":
					lead.signal(syscall.SIGKILL)
				case "sigstop":
					lead.signal(syscall.SIGSTOP)
				default:
					for _, p := range proxies[li] {
						p.setCut(true)
					}
				}
				seqdLeader(t, ps, lead, failoverWithin)
				l.waitCalls(t, 200, failoverWithin)
				first, ok := l.firstFrom(lead.addr, at)
				if !ok {
					t.Fatalf("trial %d: no value from another instance after the fault", i)
				}
				ds = append(ds, first.End-at)
				violations += l.lateBelow(first)
				// Recover the old leader as a standby for the next trial.
				switch fault {
				case "kill-9":
					<-lead.done
					ps[li] = startSeqdAt(t, bin, eps[li], prefix, lead.addr, "-init")
				case "sigstop":
					lead.signal(syscall.SIGCONT)
				default:
					for _, p := range proxies[li] {
						p.setCut(false)
					}
				}
				waitStandby(t, ps[li], failoverWithin)
			}
			l.halt()
			if err := l.v.Check().Err(); err != nil {
				t.Fatalf("verifier: %v", err)
			}
			if violations != 0 {
				t.Fatalf("%d calls got a value below the new leader's first after it had returned", violations)
			}
			var regressions uint64
			for _, cl := range l.clients {
				regressions += cl.Stats().Regressions
			}
			t.Logf("verified %d calls (%d failed attempts, retried; %d answers refused as regressions)", l.v.Len(), l.errs, regressions)
			logDistribution(t, "process-"+fault, ds)
		})
	}
}

// waitStandby waits until p answers Status as a standby.
func waitStandby(t *testing.T, p *seqdProc, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	var last error
	for time.Now().Before(deadline) {
		st, err := p.status()
		if err == nil && st.GetRole() == adminclient.RoleStandby {
			return
		}
		if err == nil {
			err = fmt.Errorf("role %q", st.GetRole())
		}
		last = err
		time.Sleep(20 * time.Millisecond)
	}
	if errors.Is(last, io.EOF) {
		last = errors.New("connection closed")
	}
	t.Fatalf("%s is not a standby within %v: %v", p.addr, within, last)
}
