package oracle_test

import (
	"errors"
	"testing"

	"github.com/seqd/seqd/oracle"
	"github.com/seqd/seqd/spec"
)

// benchOracle opens an oracle on a FileStore in a temp directory, with the
// wall clock: what a server runs. The counter window is raised from the
// default 1<<20: a benchmark claiming 64 values every ~20ns uses half of
// that in well under a millisecond, faster than an fsync, so with the
// default it would measure the disk (stalls/op shows it), not the claim.
func benchOracle(b *testing.B, format spec.Format) *oracle.Oracle {
	return open(b, oracle.Config{Format: format, Dir: b.TempDir(), Init: true, CounterWindow: 1 << 36})
}

func claimLoop(b *testing.B, o *oracle.Oracle, n int) (stalls int) {
	for {
		_, err := o.Claim(n)
		if err == nil {
			return stalls
		}
		if !errors.Is(err, oracle.ErrBehind) {
			b.Fatal(err)
		}
		stalls++ // keep the batch and retry, as a server worker would
	}
}

func BenchmarkClaim(b *testing.B) {
	for _, format := range []spec.Format{spec.FormatHybrid, spec.FormatCounter} {
		for _, n := range []int{1, 64} {
			b.Run(format.String()+"/n="+itoa(n), func(b *testing.B) {
				o := benchOracle(b, format)
				stalls := 0
				b.ReportAllocs()
				for b.Loop() {
					stalls += claimLoop(b, o, n)
				}
				b.ReportMetric(float64(stalls)/float64(b.N), "stalls/op")
			})
		}
	}
}

func BenchmarkClaimParallel(b *testing.B) {
	for _, format := range []spec.Format{spec.FormatHybrid, spec.FormatCounter} {
		for _, n := range []int{1, 64} {
			b.Run(format.String()+"/n="+itoa(n), func(b *testing.B) {
				o := benchOracle(b, format)
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						claimLoop(b, o, n)
					}
				})
				b.ReportMetric(float64(o.Stats().Stalls)/float64(b.N), "stalls/op")
			})
		}
	}
}

// BenchmarkCounterClaim is the pure state machine alone, without the
// wrapper's closed check, persister wake-up and stats.
func BenchmarkCounterClaim(b *testing.B) {
	for _, format := range []spec.Format{spec.FormatHybrid, spec.FormatCounter} {
		b.Run(format.String(), func(b *testing.B) {
			c := oracle.NewCounter(format, 1<<20, func() int64 { return T0 })
			c.SetMark(1 << 62)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.Claim(1); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func itoa(n int) string {
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + string(rune('0'+n%10))
}
