package spec

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// rfpVectors are the golden cases of the RFP layouts; each renders to one
// line of testdata/rfp.golden.
func rfpVectors() []vector {
	slot := func(op uint8, s RFPSeq) func() (string, error) {
		return func() (string, error) {
			b := make([]byte, RFPSlotLen)
			if err := PutRFPSlot(b, op, s); err != nil {
				return "", err
			}
			d, err := DecodeRFPSlot(b)
			if err != nil {
				return "", err
			}
			return fmt.Sprintf("slot op=%d seq=%d -> %x -> v%d op%d %s", op, uint64(s), b, d.Version, d.Opcode, d.Seq), nil
		}
	}
	rec := func(tag uint32, s RFPSeq, v uint64, pos int) func() (string, error) {
		return func() (string, error) {
			b := make([]byte, RFPRecordLen)
			if err := PutRFPRecord(b, tag, s, v); err != nil {
				return "", err
			}
			got, err := CheckRFPRecord(b, tag, s)
			if err != nil {
				return "", err
			}
			imm, err := RFPReplyImm(pos)
			if err != nil {
				return "", err
			}
			return fmt.Sprintf("record tag=0x%08x seq=%d value=0x%016x -> head=%x value=%x check=%x tail=%x reply(pos=%d) imm=0x%08x -> value=0x%016x",
				tag, uint64(s), v, b[0:8], b[8:16], b[16:24], b[24:32], pos, imm, got), nil
		}
	}
	return []vector{
		{"rfp-slot-one", slot(RFPOpFetch, 1)},
		{"rfp-slot-reply", slot(RFPOpReply, 0x0123456789ab)},
		{"rfp-slot-max", slot(RFPOpFetch, RFPSeqMask)},
		{"rfp-rec-one", rec(0x1234abcd, 1, 0x06507ca5f0000001, 0)},
		{"rfp-rec-max", rec(0x7fffffff, RFPSeqMask, 0xfedcba9876543210, RFPMaxWindow-1)},
		{"rfp-rec-zero-tag", rec(0, 0xabcdef, 1, 17)},
	}
}

// checkGoldenVectors renders vs and compares them with testdata/file
// (-update rewrites it).
func checkGoldenVectors(t *testing.T, file string, vs []vector) {
	t.Helper()
	var b strings.Builder
	for _, v := range vs {
		line, err := v.line()
		if err != nil {
			t.Fatalf("%s: %v", v.name, err)
		}
		fmt.Fprintf(&b, "%s: %s\n", v.name, line)
	}
	path := filepath.Join("testdata", file)
	if *update {
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./spec -update to create it)", err)
	}
	if got := b.String(); got != string(want) {
		t.Errorf("layouts differ from %s (go test ./spec -update rewrites it):\ngot:\n%swant:\n%s", path, got, want)
	}
}

func TestGoldenRFP(t *testing.T) { checkGoldenVectors(t, "rfp.golden", rfpVectors()) }

func TestRFPSlotErrors(t *testing.T) {
	b := make([]byte, RFPSlotLen)
	for _, c := range []struct {
		name string
		op   uint8
		s    RFPSeq
		want error
	}{
		{"seq zero", RFPOpFetch, 0, ErrBadSeq},
		{"seq too big", RFPOpFetch, RFPSeqMask + 1, ErrBadSeq},
		{"bad opcode", 3, 1, ErrBadOpcode},
	} {
		if err := PutRFPSlot(b, c.op, c.s); !errors.Is(err, c.want) {
			t.Errorf("%s: PutRFPSlot = %v, want %v", c.name, err, c.want)
		}
	}
	if err := PutRFPSlot(b[:7], RFPOpFetch, 1); !errors.Is(err, ErrBadLength) {
		t.Errorf("short buffer: %v", err)
	}
	for _, c := range []struct {
		name string
		b    []byte
		want error
	}{
		{"empty", make([]byte, 8), ErrEmptySlot},
		{"short", make([]byte, 7), ErrBadLength},
		{"version", []byte{2, 1, 0, 0, 0, 0, 0, 1}, ErrBadVersion},
		{"opcode", []byte{1, 0, 0, 0, 0, 0, 0, 1}, ErrBadOpcode},
		{"seq zero", []byte{1, 1, 0, 0, 0, 0, 0, 0}, ErrBadSeq},
		{"herd slot", []byte{1, 1, 0, 0, 0, 0, 0, 1}, nil}, // same first bytes: a valid fetch of seq 1
	} {
		if _, err := DecodeRFPSlot(c.b); !errors.Is(err, c.want) {
			t.Errorf("%s: DecodeRFPSlot(%x) = %v, want %v", c.name, c.b, err, c.want)
		}
	}
}

func TestRFPSeq(t *testing.T) {
	for _, c := range []struct{ in, want RFPSeq }{{1, 2}, {RFPSeqMask, 1}, {0, 1}} {
		if got := c.in.Next(); got != c.want {
			t.Errorf("%d.Next() = %d, want %d", c.in, got, c.want)
		}
	}
	for _, c := range []struct {
		a, b RFPSeq
		want bool
	}{{2, 1, true}, {1, 2, false}, {1, 1, false}, {1, RFPSeqMask, true}, {RFPSeqMask, 1, false}, {1 << 46, 1, true}} {
		if got := c.a.After(c.b); got != c.want {
			t.Errorf("%d.After(%d) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
}

// TestRFPRecordWordTearing: a READ that races the server's write returns,
// word by word, the old record or the new one (the model of an RDMA READ
// of one cache line with 8-byte atomic words, in any order). Of the 16
// mixtures the whole new record is accepted, and any mixture accepted
// yields the new record's value; a head from an old record of another seq
// is not ready. The old record is another seq of the same session, another
// session's record (of the same seq, or another), or zeros.
func TestRFPRecordWordTearing(t *testing.T) {
	const tag = 0x1234abcd
	const s = RFPSeq(77)
	const want = 0x0650_0000_0000_0042
	newRec := make([]byte, RFPRecordLen)
	if err := PutRFPRecord(newRec, tag, s, want); err != nil {
		t.Fatal(err)
	}
	olds := map[string][]byte{"zeros": make([]byte, RFPRecordLen)}
	for name, o := range map[string]struct {
		tag uint32
		s   RFPSeq
		v   uint64
	}{
		"previous seq":            {tag, s - 1, want - 1},
		"older seq, bigger value": {tag, s - 2, want + 1},
		"other session, same seq": {tag ^ 0x55, s, want - 2},
		"other session, next seq": {tag ^ 0x55, s + 1, want + 2},
	} {
		b := make([]byte, RFPRecordLen)
		if err := PutRFPRecord(b, o.tag, o.s, o.v); err != nil {
			t.Fatal(err)
		}
		olds[name] = b
	}
	for name, old := range olds {
		for mask := range 16 {
			b := make([]byte, RFPRecordLen)
			for w := range 4 {
				src := old
				if mask&(1<<w) != 0 {
					src = newRec
				}
				copy(b[8*w:8*w+8], src[8*w:])
			}
			v, err := CheckRFPRecord(b, tag, s)
			switch {
			case err == nil && v != want:
				t.Errorf("%s: words %04b from the new record: accepted %#x", name, mask, v)
			case mask == 15 && err != nil:
				t.Errorf("%s: the whole new record: %v", name, err)
			case mask&1 == 0 && string(old[:8]) != string(newRec[:8]) && !errors.Is(err, ErrRFPNotReady):
				t.Errorf("%s: words %04b (old head): %v, want not ready", name, mask, err)
			case mask&1 != 0 && mask&6 != 6 && !errors.Is(err, ErrRFPTorn):
				t.Errorf("%s: words %04b (new head, old value or check): %v, want torn", name, mask, err)
			}
		}
	}
}

// TestRFPRecordByteTearing mixes old and new records byte by byte at
// random (a READ with no word atomicity): none but the whole new record is
// ever accepted.
func TestRFPRecordByteTearing(t *testing.T) {
	const tag = 0x0badcafe
	r := rand.New(rand.NewPCG(1, 2))
	newRec, old := make([]byte, RFPRecordLen), make([]byte, RFPRecordLen)
	b := make([]byte, RFPRecordLen)
	accepted := 0
	for i := range 200000 {
		s := RFPSeq(r.Uint64N(RFPSeqMask) + 1)
		v := r.Uint64()
		PutRFPRecord(newRec, tag, s, v)
		PutRFPRecord(old, tag, s.Next().Next(), v+1+r.Uint64N(1<<20)) // another seq, another value
		if i%2 == 0 && s > 1 {
			PutRFPRecord(old, tag, s-1, v-1) // the previous seq, the previous value
		}
		whole := true
		for j := range b {
			if r.IntN(2) == 0 {
				b[j] = newRec[j]
			} else {
				b[j] = old[j]
				whole = whole && old[j] == newRec[j]
			}
		}
		got, err := CheckRFPRecord(b, tag, s)
		if err == nil {
			accepted++
			if got != v {
				t.Fatalf("accepted a torn record %x as %#x (want %#x)", b, got, v)
			}
		}
	}
	t.Logf("%d of 200000 mixtures accepted (each equal to the new record's value)", accepted)
}

func TestRFPRecordWords(t *testing.T) {
	w, err := RFPRecordWords(0x1234abcd, 5, 0x42)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, RFPRecordLen)
	for i := range w {
		binary.NativeEndian.PutUint64(b[8*i:], w[i])
	}
	if v, err := CheckRFPRecord(b, 0x1234abcd, 5); err != nil || v != 0x42 {
		t.Fatalf("words stored natively: %#x, %v", v, err)
	}
	if _, err := RFPRecordWords(1, 0, 1); !errors.Is(err, ErrBadSeq) {
		t.Fatalf("seq 0: %v", err)
	}
	if _, err := CheckRFPRecord(b[:31], 1, 5); !errors.Is(err, ErrBadLength) {
		t.Fatalf("short record: %v", err)
	}
}

// TestRFPSlotStateTake walks the server's per-slot rule through the
// sequences a client produces (fetch, retries, fallback, retransmission
// under a fresh seq) and a few it must not be fooled by.
func TestRFPSlotStateTake(t *testing.T) {
	f := func(s RFPSeq) RFPSlot { return RFPSlot{RFPVersion, RFPOpFetch, s} }
	r := func(s RFPSeq) RFPSlot { return RFPSlot{RFPVersion, RFPOpReply, s} }
	type step struct {
		sl     RFPSlot
		answer bool // the worker answers (writes the record) after the step
		want   RFPAction
	}
	for _, c := range []struct {
		name  string
		steps []step
	}{
		{"fetch", []step{{f(1), true, RFPAnswer}, {f(1), false, RFPIgnore}, {f(2), true, RFPAnswer}}},
		{"fallback after answer", []step{{f(1), true, RFPAnswer}, {r(1), false, RFPResend}, {r(1), false, RFPIgnore}}},
		{"fallback after drop", []step{{f(1), false, RFPAnswer}, {r(1), true, RFPAnswerSend}, {r(1), false, RFPIgnore}}},
		{"reply overwrote fetch", []step{{r(1), true, RFPAnswerSend}, {f(1), false, RFPIgnore}}},
		{"older seq", []step{{f(5), true, RFPAnswer}, {f(4), false, RFPIgnore}, {r(4), false, RFPIgnore}}},
		{"fresh seq after drop", []step{{f(5), false, RFPAnswer}, {f(6), true, RFPAnswer}, {r(6), false, RFPResend}}},
		{"wrap", []step{{f(RFPSeqMask), true, RFPAnswer}, {f(1), true, RFPAnswer}, {f(RFPSeqMask), false, RFPIgnore}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var st RFPSlotState
			for i, s := range c.steps {
				if got := st.Take(s.sl); got != s.want {
					t.Fatalf("step %d (%+v): %v, want %v", i, s.sl, got, s.want)
				}
				if s.answer {
					st.Answer(uint64(100 + i))
				}
			}
		})
	}
}

// TestRFPSlotStateOnce: whatever a client writes into one slot, the server
// claims at most one value per seq and sends at most once per seq
// (against a dumb reference: sets of seqs seen).
func TestRFPSlotStateOnce(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	var st RFPSlotState
	claimed, sent := map[RFPSeq]int{}, map[RFPSeq]int{}
	cur := RFPSeq(1)
	for range 100000 {
		switch r.IntN(6) {
		case 0:
			cur = cur.Next()
		case 1:
			if cur > 3 {
				cur -= RFPSeq(r.IntN(3))
			}
		}
		op := uint8(RFPOpFetch)
		if r.IntN(3) == 0 {
			op = RFPOpReply
		}
		a := st.Take(RFPSlot{RFPVersion, op, cur})
		switch a {
		case RFPAnswer, RFPAnswerSend:
			claimed[cur]++
			if r.IntN(4) != 0 {
				st.Answer(uint64(cur))
			}
		}
		if a == RFPAnswerSend || a == RFPResend {
			sent[cur]++
			if a == RFPResend && (!st.Answered || st.Value != uint64(cur)) {
				t.Fatalf("resend of %v without its answer (%+v)", cur, st)
			}
		}
	}
	for s, n := range sent {
		if n > 1 {
			t.Fatalf("%v sent %d times", s, n)
		}
	}
	// A seq is claimed twice only when it was dropped unanswered, then
	// asked for by reply: never more than twice.
	for s, n := range claimed {
		if n > 2 {
			t.Fatalf("%v claimed %d times", s, n)
		}
	}
}

func TestRFPReply(t *testing.T) {
	if _, err := RFPReplyImm(RFPMaxWindow); !errors.Is(err, ErrBadPos) {
		t.Fatal(err)
	}
	if p, err := DecodeRFPReply(3, 4, RFPRecordLen); err != nil || p != 3 {
		t.Fatal(p, err)
	}
	if _, err := DecodeRFPReply(4, 4, RFPRecordLen); !errors.Is(err, ErrBadPos) {
		t.Fatal(err)
	}
	if _, err := DecodeRFPReply(0, 4, 8); !errors.Is(err, ErrBadLength) {
		t.Fatal(err)
	}
}

func FuzzDecodeRFPSlot(f *testing.F) {
	f.Add([]byte{1, 1, 0, 0, 0, 0, 0, 1})
	f.Add([]byte{1, 2, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := DecodeRFPSlot(b)
		if err != nil {
			return
		}
		out := make([]byte, RFPSlotLen)
		if err := PutRFPSlot(out, s.Opcode, s.Seq); err != nil || string(out) != string(b) {
			t.Fatalf("%x decoded to %+v, encodes to %x (%v)", b, s, out, err)
		}
	})
}

func FuzzCheckRFPRecord(f *testing.F) {
	good := make([]byte, RFPRecordLen)
	PutRFPRecord(good, 7, 9, 11)
	f.Add(good, uint32(7), uint64(9))
	f.Fuzz(func(t *testing.T, b []byte, tag uint32, want uint64) {
		v, err := CheckRFPRecord(b, tag, RFPSeq(want))
		if err != nil {
			return
		}
		out := make([]byte, RFPRecordLen)
		if err := PutRFPRecord(out, tag, RFPSeq(want), v); err != nil || string(out) != string(b) {
			t.Fatalf("accepted %x as %#x; the record of it is %x (%v)", b, v, out, err)
		}
	})
}
