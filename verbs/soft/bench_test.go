package soft

import (
	"testing"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/seqd/seqd/verbs/echo"
)

// The echo benchmarks measure header-only UD SEND_WITH_IMM request/response
// round trips through the provider, next to the same exchange over raw
// UDP sockets with GSO and GRO (28-byte datagrams: the size of a
// header-only RoCEv2 SEND_WITH_IMM), measured in the same run by package
// verbs/echo. Client and server busy-poll on their own threads (one per
// core on a 2-core machine). b.N counts round trips; Mops is millions of
// round trips per second. The ping-pong benchmarks keep one request in
// flight; rtt_us is the mean round-trip time, p50_us and p99_us
// percentiles.

type pair func() (cli, srv echo.Side, err error)

func softPair() (cli, srv echo.Side, err error) { return echo.VerbsPair("soft", "127.0.0.1:0", nil) }

func benchEcho(b *testing.B, open pair) {
	cli, srv, err := open()
	if err != nil {
		b.Fatal(err)
	}
	defer cli.Close()
	defer srv.Close()
	b.ReportAllocs()
	b.ResetTimer()
	n, el, err := echo.Run(cli, srv, b.N, 0)
	b.StopTimer()
	if err != nil || n < b.N {
		b.Fatalf("%d of %d round trips: %v", n, b.N, err)
	}
	b.ReportMetric(float64(n)/el.Seconds()/1e6, "Mops")
}

func benchPingPong(b *testing.B, open pair) {
	cli, srv, err := open()
	if err != nil {
		b.Fatal(err)
	}
	defer cli.Close()
	defer srv.Close()
	h := hdrhistogram.New(1, int64(time.Second), 3)
	b.ReportAllocs()
	b.ResetTimer()
	el, err := echo.PingPong(cli, srv, b.N, func(d time.Duration) { h.RecordValue(min(d.Nanoseconds(), int64(time.Second))) })
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(el.Microseconds())/float64(b.N), "rtt_us")
	b.ReportMetric(float64(h.ValueAtQuantile(50))/1e3, "p50_us")
	b.ReportMetric(float64(h.ValueAtQuantile(99))/1e3, "p99_us")
}

func BenchmarkEchoSoft(b *testing.B)     { benchEcho(b, softPair) }
func BenchmarkEchoRaw(b *testing.B)      { benchEcho(b, echo.RawPair) }
func BenchmarkPingPongSoft(b *testing.B) { benchPingPong(b, softPair) }
func BenchmarkPingPongRaw(b *testing.B)  { benchPingPong(b, echo.RawPair) }
