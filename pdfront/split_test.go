package pdfront

import "testing"

func TestSplit(t *testing.T) {
	const ms = uint64(1_700_000_000_000)
	for _, tc := range []struct {
		name  string
		last  uint64
		count int
		p, l  int64
	}{
		{"one", ms<<18 + 5, 1, int64(ms), 5},
		{"inside a millisecond", ms<<18 + 100, 10, int64(ms), 100},
		{"first of a millisecond", ms<<18 + 9, 10, int64(ms), 9},
		{"across a millisecond", (ms+1)<<18 + 3, 10, int64(ms), 1<<18 + 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, l := split(tc.last, tc.count)
			if p != tc.p || l != tc.l {
				t.Fatalf("split(%d, %d) = %d, %d; want %d, %d", tc.last, tc.count, p, l, tc.p, tc.l)
			}
			// PD's client derives logical-count+1 .. logical: each must
			// compose to the exact value, the first one's logical >= 0.
			if first := l - int64(tc.count) + 1; first < 0 || first >= 1<<18 {
				t.Fatalf("first logical %d", first)
			}
			for i := range int64(tc.count) {
				if got, want := compose(p, l-int64(tc.count)+1+i), tc.last-uint64(tc.count)+1+uint64(i); got != want {
					t.Fatalf("value %d composes to %d, want %d", i, got, want)
				}
			}
		})
	}
}
