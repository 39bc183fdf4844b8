package spec

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// darpcVectors are the golden cases of the DaRPC messages; each renders to
// one line of testdata/darpc.golden.
func darpcVectors() []vector {
	call := func(id uint64, n int) func() (string, error) {
		return func() (string, error) {
			b := make([]byte, DaRPCCallLen)
			if err := PutDaRPCCall(b, id, n); err != nil {
				return "", err
			}
			m, err := DecodeDaRPCCall(b)
			if err != nil {
				return "", err
			}
			return fmt.Sprintf("call id=0x%016x count=%d -> %x -> %v id=0x%016x count=%d", id, n, b, m.Kind, m.ID, m.Count), nil
		}
	}
	ans := func(kind DaRPCKind, id uint64, n int, first uint64) func() (string, error) {
		return func() (string, error) {
			b := make([]byte, DaRPCAnswerLen)
			if err := PutDaRPCAnswer(b, kind, id, n, first); err != nil {
				return "", err
			}
			m, err := DecodeDaRPCAnswer(b)
			if err != nil {
				return "", err
			}
			return fmt.Sprintf("answer %v id=0x%016x count=%d first=0x%016x -> %x -> %v id=0x%016x count=%d first=0x%016x",
				kind, id, n, first, b, m.Kind, m.ID, m.Count, m.First), nil
		}
	}
	refused := func() (string, error) {
		b := make([]byte, DaRPCAnswerLen)
		if err := PutDaRPCAnswer(b, DaRPCValues, 7, 3, 0x06507ca5f0000001); err != nil {
			return "", err
		}
		RefuseDaRPCAnswer(b)
		m, err := DecodeDaRPCAnswer(b)
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("values id=7 count=3 refused in place -> %x -> %v first=%d", b, m.Kind, m.First), nil
	}
	return []vector{
		{"darpc-call-one", call(1, 1)},
		{"darpc-call-max", call(0xfedcba9876543210, DaRPCMaxCalls)},
		{"darpc-values-one", ans(DaRPCValues, 1, 1, 0x06507ca5f0000001)},
		{"darpc-values-batch", ans(DaRPCValues, 0x8000000000000000, 32, 0x06507ca5f0040000)},
		{"darpc-refused", ans(DaRPCRefused, 42, 5, 0)},
		{"darpc-refuse-in-place", refused},
	}
}

func TestGoldenDaRPC(t *testing.T) {
	checkGolden(t, "darpc.golden", "DaRPC layouts", renderVectors(t, darpcVectors()))
}

func TestDaRPCDecodeErrors(t *testing.T) {
	call := make([]byte, DaRPCCallLen)
	if err := PutDaRPCCall(call, 9, 4); err != nil {
		t.Fatal(err)
	}
	ans := make([]byte, DaRPCAnswerLen)
	if err := PutDaRPCAnswer(ans, DaRPCValues, 9, 4, 100); err != nil {
		t.Fatal(err)
	}
	mod := func(b []byte, i int, v byte) []byte {
		c := bytes.Clone(b)
		c[i] = v
		return c
	}
	wrap := bytes.Clone(ans)
	copy(wrap[12:], []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe})
	refusedWithValue := mod(ans, 1, byte(DaRPCRefused))
	for _, c := range []struct {
		name   string
		b      []byte
		answer bool
		want   error
	}{
		{"call ok", call, false, nil},
		{"call short", call[:11], false, ErrBadLength},
		{"call long", append(bytes.Clone(call), 0), false, ErrBadLength},
		{"call version", mod(call, 0, 2), false, ErrDaRPCVersion},
		{"call kind", mod(call, 1, byte(DaRPCValues)), false, ErrDaRPCKind},
		{"call count 0", mod(mod(call, 2, 0), 3, 0), false, ErrDaRPCCount},
		{"call count big", mod(call, 2, 1), false, ErrDaRPCCount},
		{"answer ok", ans, true, nil},
		{"answer short", ans[:19], true, ErrBadLength},
		{"answer version", mod(ans, 0, 0), true, ErrDaRPCVersion},
		{"answer kind call", mod(ans, 1, byte(DaRPCCall)), true, ErrDaRPCKind},
		{"answer count 0", mod(ans, 3, 0), true, ErrDaRPCCount},
		{"answer wraps", wrap, true, ErrDaRPCCount},
		{"refusal with value", refusedWithValue, true, ErrDaRPCKind},
		{"values zero", mod(ans, 19, 0), true, ErrDaRPCCount},
	} {
		t.Run(c.name, func(t *testing.T) {
			var err error
			if c.answer {
				_, err = DecodeDaRPCAnswer(c.b)
			} else {
				_, err = DecodeDaRPCCall(c.b)
			}
			if !errors.Is(err, c.want) || (c.want == nil) != (err == nil) {
				t.Fatalf("decode(%x) = %v, want %v", c.b, err, c.want)
			}
		})
	}
	if err := PutDaRPCCall(make([]byte, DaRPCCallLen), 1, DaRPCMaxCalls+1); !errors.Is(err, ErrDaRPCCount) {
		t.Errorf("PutDaRPCCall(too many) = %v", err)
	}
	if err := PutDaRPCAnswer(make([]byte, DaRPCAnswerLen), DaRPCCall, 1, 1, 1); !errors.Is(err, ErrDaRPCKind) {
		t.Errorf("PutDaRPCAnswer(kind call) = %v", err)
	}
}

// TestDaRPCRingDifferential drives the ring and a dumb reference (a map
// of call ID to call count, FIFO not assumed) with random opens, answers
// (in flight, stale, repeated, forged counts) and undos, and checks that
// they agree on every step.
func TestDaRPCRingDifferential(t *testing.T) {
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 7))
		window := 1 + rng.IntN(40)
		first := rng.Uint64()
		if seed == 0 {
			first = ^uint64(0) - 5 // wraps
		}
		r := NewDaRPCRing(window, first)
		ref := map[uint64]int{}
		refCalls := 0
		next := first
		var sent []uint64 // every ID ever opened
		for step := range 3000 {
			now := time.Duration(step)
			switch op := rng.IntN(10); {
			case op < 4:
				n := 1 + rng.IntN(min(window, DaRPCMaxCalls))
				id, _, ok := r.Open(now, n)
				// The reference admits when the calls fit and no message
				// window IDs older is still in flight (its slot).
				_, clash := ref[next-uint64(window)]
				wantOK := refCalls+n <= window && !clash
				if ok != wantOK {
					t.Fatalf("seed %d step %d: Open(%d) ok=%v, reference %v (calls %d window %d)", seed, step, n, ok, wantOK, refCalls, window)
				}
				if ok {
					if id != next {
						t.Fatalf("seed %d: id %d, want %d", seed, id, next)
					}
					ref[id] = n
					refCalls += n
					sent = append(sent, id)
					next++
					if rng.IntN(20) == 0 {
						r.Unsend(id)
						delete(ref, id)
						refCalls -= n
						sent = sent[:len(sent)-1]
						next--
					}
				}
			default:
				if len(sent) == 0 {
					continue
				}
				id := sent[rng.IntN(len(sent))]
				if rng.IntN(10) == 0 {
					id = rng.Uint64() // forged
				}
				count, in := ref[id]
				if rng.IntN(10) == 0 {
					count++ // wrong count
				}
				if !in {
					count = 1 + rng.IntN(4)
				}
				_, n, ok := r.Answer(id, count)
				if ok != (in && ref[id] == count) {
					t.Fatalf("seed %d step %d: Answer(%d,%d) ok=%v, reference in=%v n=%d", seed, step, id, count, ok, in, ref[id])
				}
				if ok {
					if n != ref[id] {
						t.Fatalf("n %d want %d", n, ref[id])
					}
					refCalls -= n
					delete(ref, id)
				}
			}
			if r.Calls() != refCalls || r.Free() != window-refCalls {
				t.Fatalf("seed %d step %d: calls %d, reference %d", seed, step, r.Calls(), refCalls)
			}
			oldest, ok := r.Oldest()
			var want uint64
			found := false
			for id := range ref {
				if !found || id-first < want-first {
					want, found = id, true
				}
			}
			if ok != found {
				t.Fatalf("seed %d step %d: Oldest ok=%v, reference %v", seed, step, ok, found)
			}
			if ok {
				s := r.slots[want%uint64(len(r.slots))]
				if s.id != want || s.sent != oldest {
					t.Fatalf("seed %d step %d: Oldest %v, reference id %d sent %v", seed, step, oldest, want, s.sent)
				}
			}
		}
	}
}

// FuzzDecodeDaRPC: any bytes decode to a message or an error, never a
// panic, and a decoded message re-encodes to the same bytes.
func FuzzDecodeDaRPC(f *testing.F) {
	c := make([]byte, DaRPCCallLen)
	PutDaRPCCall(c, 5, 3)
	a := make([]byte, DaRPCAnswerLen)
	PutDaRPCAnswer(a, DaRPCValues, 5, 3, 1000)
	f.Add(c)
	f.Add(a)
	f.Add([]byte{1, 3, 0, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		if m, err := DecodeDaRPCCall(b); err == nil {
			back := make([]byte, DaRPCCallLen)
			if err := PutDaRPCCall(back, m.ID, m.Count); err != nil || !bytes.Equal(back, b) {
				t.Fatalf("call %x re-encodes to %x (%v)", b, back, err)
			}
		}
		if m, err := DecodeDaRPCAnswer(b); err == nil {
			back := make([]byte, DaRPCAnswerLen)
			if err := PutDaRPCAnswer(back, m.Kind, m.ID, m.Count, m.First); err != nil || !bytes.Equal(back, b) {
				t.Fatalf("answer %x re-encodes to %x (%v)", b, back, err)
			}
			if m.Kind == DaRPCValues && m.First+uint64(m.Count-1) < m.First {
				t.Fatalf("accepted a wrapping range %+v", m)
			}
		}
	})
}
