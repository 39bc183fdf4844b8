// Command rigclient is the multi-host rig's client host: one process, run
// on its own host (a network namespace) by the tests of e2e/multihost,
// that holds many sessions of the client library to seqd and calls
// GetTimestamp on each of them until told to stop. Every call's interval
// is read on CLOCK_MONOTONIC, which every process on the machine shares,
// so the test can verify the calls of all hosts together and compare
// them with the moments it killed or restarted a server.
//
// It talks to the test over stdin and stdout, one line each way:
//
//	out: READY <sessions>            every session dialed and served once
//	in:  call <duration>             one extra call on session 0 with that
//	                                 context deadline (the probe)
//	out: CALL ok <value> <start> <end> | CALL err <start> <end> <error>
//	in:  mark <ns>                   watch for every session to be served
//	                                 by a call that started at or after ns
//	out: SERVED <ns> <end>           ... and so they were, the last such
//	                                 call ending at end (CLOCK_MONOTONIC)
//	in:  profile <file>              a CPU profile from now to stop
//	in:  stop (or EOF)               stop, write -out, exit
//	out: DONE <calls> <errors>
//
// -out receives one 32-byte little-endian record per call: session
// (uint32), ok (uint32, 1 or 0), start and end (int64 ns), value (uint64).
package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"

	"github.com/seqd/seqd/admin/adminclient"
	"github.com/seqd/seqd/client"
)

// RecordSize is the size of one -out record.
const RecordSize = 32

func mono() int64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

type record struct {
	session    uint32
	ok         bool
	start, end int64
	value      uint64
}

func main() {
	adminAddr := flag.String("admin", "", "seqd admin address(es), comma-separated")
	device := flag.String("device", "", "the clients' soft device (IP:port); empty: the library's default (the route to seqd)")
	sessions := flag.Int("sessions", 1, "client sessions (one client.Client each)")
	period := flag.Duration("period", 100*time.Millisecond, "mean pause between a session's calls (jittered ±50%)")
	deadline := flag.Duration("deadline", 30*time.Second, "each call's context deadline")
	timeout := flag.Duration("timeout", 0, "client.WithTimeout (0: the library's default)")
	dialTimeout := flag.Duration("dial-timeout", 60*time.Second, "bound on dialing every session")
	dialConc := flag.Int("dial-concurrency", 32, "sessions dialed at once")
	tlsCA := flag.String("tls-ca", "", "admin TLS: the CA that verifies seqd")
	insecure := flag.Bool("insecure", false, "plaintext admin plane off loopback (client.WithInsecure)")
	out := flag.String("out", "", "write the call records here")
	flag.Parse()
	if err := run(*adminAddr, *device, *sessions, *period, *deadline, *timeout, *dialTimeout, *dialConc, *tlsCA, *insecure, *out); err != nil {
		fmt.Fprintln(os.Stderr, "rigclient:", err)
		os.Exit(1)
	}
}

func run(adminAddr, device string, sessions int, period, deadline, timeout, dialTimeout time.Duration, dialConc int, tlsCA string, insecure bool, out string) error {
	var opts []client.Option
	var logTo io.Writer = io.Discard
	if os.Getenv("SEQD_RIG_CLIENT_DEBUG") != "" { // the library's debug log on stderr
		logTo = os.Stderr
	}
	logger := slog.New(slog.NewTextHandler(logTo, &slog.HandlerOptions{Level: slog.LevelDebug}))
	opts = append(opts, client.WithWindow(4))
	if device != "" {
		opts = append(opts, client.WithDevice("soft", device, ""))
	}
	if timeout > 0 {
		opts = append(opts, client.WithTimeout(timeout))
	}
	if insecure {
		opts = append(opts, client.WithInsecure())
	}
	if tlsCA != "" {
		creds, err := adminclient.ClientTLS(adminclient.TLSConfig{CAFile: tlsCA})
		if err != nil {
			return err
		}
		opts = append(opts, client.WithAdminDialOptions(grpc.WithTransportCredentials(creds)))
	}

	// Dial every session, a few at a time, and serve each once.
	clients := make([]*client.Client, sessions)
	dctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
	defer cancel()
	sem := make(chan struct{}, dialConc)
	var wg sync.WaitGroup
	var firstErr atomic.Pointer[error]
	for i := range clients {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			name := fmt.Sprintf("rig-%d", i)
			c, err := client.Dial(dctx, adminAddr, append(opts, client.WithName(name), client.WithLogger(logger.With("client", name)))...)
			if err == nil {
				if _, err = c.GetTimestamp(dctx); err != nil {
					c.Close()
				}
			}
			if err != nil {
				err = fmt.Errorf("session %d: %w", i, err)
				firstErr.CompareAndSwap(nil, &err)
				return
			}
			clients[i] = c
		}()
	}
	wg.Wait()
	defer func() {
		for _, c := range clients {
			if c != nil {
				c.Close()
			}
		}
	}()
	if p := firstErr.Load(); p != nil {
		return *p
	}
	fmt.Printf("READY %d\n", sessions)

	// The load: every session calls, pauses, calls again.
	stop := make(chan struct{})
	recs := make([][]record, sessions)
	lastOK := make([]atomic.Int64, sessions) // start of each session's latest good call
	lastEnd := make([]atomic.Int64, sessions)
	var calls, errs atomic.Int64
	var lwg sync.WaitGroup
	for i, c := range clients {
		lwg.Add(1)
		go func() {
			defer lwg.Done()
			rng := rand.New(rand.NewPCG(uint64(i), uint64(time.Now().UnixNano())))
			for {
				ctx, cancel := context.WithTimeout(context.Background(), deadline)
				start := mono()
				ts, err := c.GetTimestamp(ctx)
				end := mono()
				cancel()
				recs[i] = append(recs[i], record{uint32(i), err == nil, start, end, uint64(ts)})
				calls.Add(1)
				if err != nil {
					errs.Add(1)
				} else {
					lastEnd[i].Store(end)
					lastOK[i].Store(start)
				}
				pause := period/2 + time.Duration(rng.Int64N(int64(period)+1))
				select {
				case <-stop:
					return
				case <-time.After(pause):
				}
			}
		}()
	}

	// The test's commands.
	var probes []record
	var outMu sync.Mutex
	say := func(format string, a ...any) {
		outMu.Lock()
		fmt.Printf(format, a...)
		outMu.Unlock()
	}
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		if f[0] == "stop" {
			break
		}
		if f[0] == "profile" && len(f) == 2 {
			// A CPU profile from now to stop.
			if pf, err := os.Create(f[1]); err == nil && pprof.StartCPUProfile(pf) == nil {
				defer pprof.StopCPUProfile()
			}
			continue
		}
		if f[0] == "mark" && len(f) == 2 {
			var mark int64
			fmt.Sscan(f[1], &mark)
			go watch(mark, lastOK, lastEnd, stop, say)
			continue
		}
		if f[0] == "call" && len(f) == 2 {
			d, err := time.ParseDuration(f[1])
			if err != nil {
				say("CALL err 0 0 %v\n", err)
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), d)
			start := mono()
			ts, err := clients[0].GetTimestamp(ctx)
			end := mono()
			cancel()
			// The probe's call is session 0's too: it is verified with it.
			probes = append(probes, record{0, err == nil, start, end, uint64(ts)})
			if err != nil {
				say("CALL err %d %d %v\n", start, end, err)
			} else {
				say("CALL ok %d %d %d\n", ts, start, end)
			}
		}
	}
	close(stop)
	lwg.Wait()
	if out != "" {
		if err := writeRecords(out, append(recs, probes)); err != nil {
			return err
		}
	}
	fmt.Printf("DONE %d %d\n", calls.Load(), errs.Load())
	return nil
}

// watch says SERVED once every session has had a good call that started
// at or after mark.
func watch(mark int64, lastOK, lastEnd []atomic.Int64, stop <-chan struct{}, say func(string, ...any)) {
	for {
		var last int64
		all := true
		for i := range lastOK {
			if lastOK[i].Load() < mark {
				all = false
				break
			}
			last = max(last, lastEnd[i].Load())
		}
		if all {
			say("SERVED %d %d\n", mark, last)
			return
		}
		select {
		case <-stop:
			return
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func writeRecords(path string, recs [][]record) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	var b [RecordSize]byte
	for _, rs := range recs {
		for _, r := range rs {
			binary.LittleEndian.PutUint32(b[0:], r.session)
			ok := uint32(0)
			if r.ok {
				ok = 1
			}
			binary.LittleEndian.PutUint32(b[4:], ok)
			binary.LittleEndian.PutUint64(b[8:], uint64(r.start))
			binary.LittleEndian.PutUint64(b[16:], uint64(r.end))
			binary.LittleEndian.PutUint64(b[24:], r.value)
			w.Write(b[:])
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
