package loadgen

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Redis INCR is the reference a user sizing seqd knows: the same run
// starts a private redis-server (if installed) and drives INCR on one key
// with Pipeline commands in flight on each of Conns connections, as
// redis-benchmark -P 64 -c 50 does, with a lean pipelined RESP client.

// Redis reference geometry: redis-benchmark's -c 50 -P 64.
const (
	RedisConns    = 50
	RedisPipeline = 64
)

// ErrRedis reports that the Redis reference could not be measured;
// ErrNoRedisServer that redis-server is not installed.
var (
	ErrRedis         = errors.New("loadgen: redis")
	ErrNoRedisServer = fmt.Errorf("%w: redis-server not installed", ErrRedis)
)

// RedisResult is the Redis INCR reference.
type RedisResult struct {
	Ops          float64 `json:"ops"`
	Conns        int     `json:"conns"`
	Pipeline     int     `json:"pipeline"`
	UserNsPerReq float64 `json:"server_user_ns_per_req"`
	SysNsPerReq  float64 `json:"server_sys_ns_per_req"`
	Skipped      string  `json:"skipped,omitempty"`
}

// redisServer is a private redis-server.
type redisServer struct {
	cmd  *exec.Cmd
	dir  string
	addr string
	done chan error
}

// startRedis starts redis-server on a free loopback port in a temporary
// directory, with persistence off, and waits until it answers PING.
func startRedis(ctx context.Context) (*redisServer, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, ErrNoRedisServer
	}
	addr, err := freePort()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrRedis, err)
	}
	_, port, _ := net.SplitHostPort(addr)
	dir, err := os.MkdirTemp("", "loadgen-redis-")
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrRedis, err)
	}
	cmd := exec.Command(bin, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", dir, "--daemonize", "no", "--protected-mode", "no", "--logfile", filepath.Join(dir, "redis.log"))
	if err := unpinned(cmd.Start); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("%w: start: %v", ErrRedis, err)
	}
	s := &redisServer{cmd: cmd, dir: dir, addr: addr, done: make(chan error, 1)}
	go func() { s.done <- cmd.Wait() }()
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.SetDeadline(time.Now().Add(time.Second))
			_, err = c.Write([]byte("PING\r\n"))
			var b [16]byte
			if err == nil {
				var n int
				n, err = c.Read(b[:])
				if err == nil && string(b[:n]) != "+PONG\r\n" {
					err = fmt.Errorf("PING answered %q", b[:n])
				}
			}
			c.Close()
			if err == nil {
				return s, nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			s.stop()
			return nil, fmt.Errorf("%w: not ready: %v", ErrRedis, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (s *redisServer) pid() int { return s.cmd.Process.Pid }

func (s *redisServer) stop() {
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(3 * time.Second):
		s.cmd.Process.Kill()
		<-s.done
	}
	os.RemoveAll(s.dir)
}

// incrCmd is one pipelined INCR in RESP.
const incrCmd = "*2\r\n$4\r\nINCR\r\n$7\r\nloadgen\r\n"

// redisConn is one pipelined connection: it writes Pipeline INCRs, reads
// as many integer replies, and checks that they increase.
type redisConn struct {
	c    net.Conn
	out  []byte
	in   *bufio.Reader
	last int64
}

func (rc *redisConn) round() (int, error) {
	if _, err := rc.c.Write(rc.out); err != nil {
		return 0, err
	}
	for i := range RedisPipeline {
		line, err := rc.in.ReadSlice('\n')
		if err != nil {
			return i, err
		}
		if len(line) < 4 || line[0] != ':' || line[len(line)-2] != '\r' {
			return i, fmt.Errorf("%w: reply %q", ErrRedis, line)
		}
		v, err := strconv.ParseInt(string(line[1:len(line)-2]), 10, 64)
		if err != nil || v <= rc.last {
			return i, fmt.Errorf("%w: INCR returned %q after %d", ErrRedis, line, rc.last)
		}
		rc.last = v
	}
	return RedisPipeline, nil
}

// driveRedis runs the connections for warmup+d and returns the INCRs per
// second inside d; measure is called at the start (true) and end (false)
// of d.
func driveRedis(ctx context.Context, addr string, warmup, d time.Duration, measure func(bool)) (float64, error) {
	conns := make([]*redisConn, 0, RedisConns)
	defer func() {
		for _, rc := range conns {
			rc.c.Close()
		}
	}()
	out := make([]byte, 0, len(incrCmd)*RedisPipeline)
	for range RedisPipeline {
		out = append(out, incrCmd...)
	}
	for range RedisConns {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return 0, fmt.Errorf("%w: %v", ErrRedis, err)
		}
		conns = append(conns, &redisConn{c: c, out: out, in: bufio.NewReaderSize(c, 64<<10)})
	}
	var measuring atomic.Bool
	var stop atomic.Bool
	var count atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, len(conns))
	for i, rc := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				n, err := rc.round()
				if measuring.Load() {
					count.Add(int64(n))
				}
				if err != nil {
					errs[i] = err
					return
				}
			}
		}()
	}
	wait := func(t time.Duration) error {
		select {
		case <-time.After(t):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	err := wait(warmup)
	var start time.Time
	if err == nil {
		measure(true)
		start = time.Now()
		measuring.Store(true)
		err = wait(d)
		measuring.Store(false)
		measure(false)
	}
	el := time.Since(start)
	stop.Store(true)
	wg.Wait()
	if err != nil {
		return 0, err
	}
	if err := errors.Join(errs...); err != nil {
		return 0, err
	}
	return float64(count.Load()) / el.Seconds(), nil
}
