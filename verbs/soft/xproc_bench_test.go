package soft

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/seqd/seqd/verbs/echo"
)

// envRawEchoPeer makes the test binary a raw UDP echo server (TestMain):
// the other process of BenchmarkPingPongRawProcs.
const envRawEchoPeer = "SEQD_RAW_ECHO_PEER"

func TestMain(m *testing.M) {
	if p := os.Getenv(envRawEchoPeer); p != "" {
		os.Exit(serveRawEcho(p))
	}
	os.Exit(m.Run())
}

// serveRawEcho echoes to the end at 127.0.0.1:peer, busy-polling, until
// its standard input closes. It prints its own port first.
func serveRawEcho(peer string) int {
	port, err := strconv.ParseUint(peer, 10, 16)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	e, err := echo.OpenRaw()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	e.Connect(uint16(port))
	fmt.Printf("port %d\n", e.Port())
	done := make(chan struct{})
	go func() { io.Copy(io.Discard, os.Stdin); close(done) }()
	for {
		select {
		case <-done:
			return 0
		default:
		}
		if k, err := e.Poll(); err == nil && k > 0 {
			e.Send(k)
		}
	}
}

// BenchmarkPingPongRawProcs is BenchmarkPingPongRaw with its two ends in
// two processes (this binary re-run as the echo server), as a client and
// seqd are: a second Go runtime, and the kernel scheduling two processes'
// threads rather than one's. rtt_us is the mean round trip, p50_us and
// p99_us percentiles.
func BenchmarkPingPongRawProcs(b *testing.B) {
	cli, err := echo.OpenRaw()
	if err != nil {
		b.Skip(err)
	}
	defer cli.Close()
	srv := exec.Command(os.Args[0])
	srv.Env = append(os.Environ(), fmt.Sprintf("%s=%d", envRawEchoPeer, cli.Port()))
	stdin, err := srv.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := srv.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	srv.Stderr = os.Stderr
	if err := srv.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { stdin.Close(); srv.Wait() }()
	var port uint16
	if _, err := fmt.Fscanf(bufio.NewReader(stdout), "port %d\n", &port); err != nil {
		b.Fatalf("echo process: %v", err)
	}
	cli.Connect(port)
	h := hdrhistogram.New(1, int64(time.Second), 3)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		t := time.Now()
		if err := cli.Send(1); err != nil {
			b.Fatal(err)
		}
		for k := 0; k == 0; {
			if k, err = cli.Poll(); err != nil {
				b.Fatal(err)
			}
		}
		h.RecordValue(min(time.Since(t).Nanoseconds(), int64(time.Second)))
	}
	el := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(el.Microseconds())/float64(b.N), "rtt_us")
	b.ReportMetric(float64(h.ValueAtQuantile(50))/1e3, "p50_us")
	b.ReportMetric(float64(h.ValueAtQuantile(99))/1e3, "p99_us")
}
