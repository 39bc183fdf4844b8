package claim

import (
	"errors"
	"testing"

	seqdoracle "github.com/seqd/seqd/oracle"
)

// The oracle is an AtClaimer: a worker given it claims with its own clock
// reading (internal/worker asserts the capability at run time, so a
// method lost here would only show as a clock read more per batch).
var _ AtClaimer = (*seqdoracle.Oracle)(nil)

var errBehind = errors.New("behind")

type oracle struct {
	behind int // the first behind calls report errBehind
	err    error
	calls  int
}

func (o *oracle) Claim(n int) (uint64, error) {
	o.calls++
	if o.err != nil {
		return 0, o.err
	}
	if o.calls <= o.behind {
		return 0, errBehind
	}
	return 100, nil
}

func (o *oracle) Current() uint64 { return 0 }

func TestBatch(t *testing.T) {
	boom := errors.New("boom")
	tests := []struct {
		name       string
		o          *oracle
		expireAt   int // expired() reports true from this call on (0: never)
		want       Outcome
		wantStalls int
	}{
		{"at once", &oracle{}, 0, Claimed, 0},
		{"after stalls", &oracle{behind: 100}, 0, Claimed, 100},
		{"refused", &oracle{err: boom}, 0, Failed, 0},
		{"expired while behind", &oracle{behind: 1 << 30}, 3, Expired, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checks := 0
			first, stalls, out, err := Batch(tt.o, errBehind, 4, func() bool {
				checks++
				return tt.expireAt > 0 && checks >= tt.expireAt
			})
			if out != tt.want || stalls != tt.wantStalls {
				t.Fatalf("outcome %d stalls %d, want %d %d (err %v)", out, stalls, tt.want, tt.wantStalls, err)
			}
			if out == Claimed && first != 100 {
				t.Fatalf("first %d", first)
			}
			if out == Failed && !errors.Is(err, boom) {
				t.Fatalf("err %v", err)
			}
		})
	}
}

func BenchmarkBatchClaimed(b *testing.B) {
	o := &oracle{}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, _, out, _ := Batch(o, errBehind, 64, func() bool { return false }); out != Claimed {
			b.Fatal(out)
		}
	}
}
