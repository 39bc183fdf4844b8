package spec

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
)

// herdVectors are the golden cases of the HERD layouts; each renders to one
// line of testdata/herd.golden.
func herdVectors() []vector {
	slot := func(s Seq) func() (string, error) {
		return func() (string, error) {
			b := make([]byte, SlotLen)
			if err := PutSlot(b, s); err != nil {
				return "", err
			}
			d, err := DecodeSlot(b)
			if err != nil {
				return "", err
			}
			return fmt.Sprintf("slot seq=%d -> %x word=0x%016x -> v%d op%d %s", uint32(s), b, SlotWord(b), d.Version, d.Opcode, d.Seq), nil
		}
	}
	ans := func(pos int, s Seq, v uint64) func() (string, error) {
		return func() (string, error) {
			i, err := HERDAnswerImm(pos, s)
			if err != nil {
				return "", err
			}
			p := make([]byte, HERDAnswerLen)
			PutFull(p, v)
			dp, ds, dv, err := DecodeHERDAnswer(i, p)
			if err != nil {
				return "", err
			}
			return fmt.Sprintf("answer pos=%d seq=%d value=0x%016x -> imm=0x%08x payload=%x -> pos=%d %s value=0x%016x", pos, uint32(s), v, uint32(i), p, dp, ds, dv), nil
		}
	}
	return []vector{
		{"slot-one", slot(1)},
		{"slot-max", slot(SeqMask)},
		{"slot-mid", slot(0xabcdef)},
		{"herd-ans-zero-pos", ans(0, 1, 0x06507ca5f0000001)},
		{"herd-ans-max", ans(HERDMaxWindow-1, SeqMask, 0xfedcba9876543210)},
	}
}

func TestGoldenHERD(t *testing.T) {
	checkGolden(t, "herd.golden", "HERD layouts", renderVectors(t, herdVectors()))
}

func TestSeqNext(t *testing.T) {
	for _, c := range []struct{ in, want Seq }{{1, 2}, {SeqMask - 1, SeqMask}, {SeqMask, 1}, {0, 1}} {
		if got := c.in.Next(); got != c.want || !got.Valid() {
			t.Errorf("%v.Next() = %v, want %v", c.in, got, c.want)
		}
	}
}

func TestDecodeSlotErrors(t *testing.T) {
	good := make([]byte, SlotLen)
	if err := PutSlot(good, 5); err != nil {
		t.Fatal(err)
	}
	mod := func(i int, v byte) []byte {
		b := bytes.Clone(good)
		b[i] = v
		return b
	}
	cases := []struct {
		name string
		b    []byte
		want error
	}{
		{"ok", good, nil},
		{"empty", make([]byte, SlotLen), ErrEmptySlot},
		{"short", good[:7], ErrBadLength},
		{"version", mod(0, 2), ErrBadVersion},
		{"opcode", mod(1, 9), ErrBadOpcode},
		{"reserved", mod(3, 1), ErrBadOpcode},
		{"seq zero", []byte{HERDVersion, OpGetTimestamp, 0, 0, 0, 0, 0, 0}, ErrBadSeq},
		{"seq too big", []byte{HERDVersion, OpGetTimestamp, 0, 0, 1, 0, 0, 0}, ErrBadSeq},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if _, err := DecodeSlot(c.b); !errors.Is(err, c.want) {
				t.Fatalf("DecodeSlot(%x) = %v, want %v", c.b, err, c.want)
			}
		})
	}
	if err := PutSlot(make([]byte, SlotLen), 0); !errors.Is(err, ErrBadSeq) {
		t.Errorf("PutSlot(seq 0) = %v", err)
	}
	if _, err := HERDAnswerImm(HERDMaxWindow, 1); !errors.Is(err, ErrBadPos) {
		t.Errorf("HERDAnswerImm(pos too big) = %v", err)
	}
	if _, _, _, err := DecodeHERDAnswer(HERDImm(0x01000000), make([]byte, 8)); !errors.Is(err, ErrBadSeq) {
		t.Errorf("DecodeHERDAnswer(seq 0) = %v", err)
	}
	if _, _, _, err := DecodeHERDAnswer(HERDImm(0x01000001), make([]byte, 7)); !errors.Is(err, ErrBadLength) {
		t.Errorf("DecodeHERDAnswer(7 bytes) = %v", err)
	}
	if _, err := SlotIndex(10, 5, 15); !errors.Is(err, ErrBadPos) {
		t.Errorf("SlotIndex out of range = %v", err)
	}
}

// FuzzDecodeSlot: any bytes decode to a slot or an error, never a panic,
// and a decoded slot re-encodes to the same bytes.
func FuzzDecodeSlot(f *testing.F) {
	f.Add([]byte{1, 1, 0, 0, 0, 0, 0, 1})
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{1, 1, 0, 0, 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := DecodeSlot(b)
		if err != nil {
			return
		}
		if !s.Seq.Valid() {
			t.Fatalf("DecodeSlot(%x) accepted %v", b, s.Seq)
		}
		back := make([]byte, SlotLen)
		if err := PutSlot(back, s.Seq); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(back, b) {
			t.Fatalf("slot %x re-encodes to %x", b, back)
		}
		if SlotWord(b) == 0 {
			t.Fatalf("accepted slot %x has a zero word", b)
		}
	})
}

func TestHERDClassify(t *testing.T) {
	for _, c := range []struct {
		last, seq Seq
		want      HERDStep
	}{
		{0, 1, StepNew},
		{0, HERDMaxStep, StepNew},
		{0, HERDMaxStep + 1, StepAhead},
		{0, 1 << 23, StepOld}, // half the space: never newer
		{5, 5, StepOld},
		{5, 4, StepOld},
		{5, 6, StepNew},
		{5, 5 + HERDMaxStep, StepNew},
		{5, 6 + HERDMaxStep, StepAhead},
		{5, 5 + 1<<23, StepOld},
		{5, 4 + 1<<23, StepAhead},
		{SeqMask, 1, StepNew}, // the wrap skips 0
		{SeqMask - 1, SeqMask, StepNew},
		{1, SeqMask, StepOld},
		{SeqMask - 10, 10, StepNew}, // 21 apart, counting the 0 the wrap skips
	} {
		if got := HERDClassify(c.last, c.seq); got != c.want {
			t.Errorf("HERDClassify(last %d, seq %d) = %d, want %d", c.last, c.seq, got, c.want)
		}
	}
	for _, c := range []struct {
		s, t Seq
		want bool
	}{{1, 2, true}, {2, 1, false}, {3, 3, false}, {SeqMask, 1, true}, {1, 1 + 1<<23, false}, {1, 1 << 23, true}} {
		if got := c.s.Before(c.t); got != c.want {
			t.Errorf("%v.Before(%v) = %v, want %v", c.s, c.t, got, c.want)
		}
	}
}
