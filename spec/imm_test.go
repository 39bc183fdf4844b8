package spec

import (
	"errors"
	"flag"
	"fmt"
	"testing"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata/")

// vectors are the golden cases of every layout. Each renders to one line
// of testdata/layouts.golden.
type vector struct {
	name string
	line func() (string, error)
}

func vectors() []vector {
	req := func(t Tag, g Guess) func() (string, error) {
		return func() (string, error) {
			i, err := RequestImm(t, g)
			if err != nil {
				return "", err
			}
			dt, dg := DecodeRequest(i)
			return fmt.Sprintf("request tag=%d guess=0x%05x -> imm=0x%08x -> %s %s", t, uint32(g), uint32(i), dt, dg), nil
		}
	}
	ans := func(t Tag, v uint64, high uint64, full bool) func() (string, error) {
		return func() (string, error) {
			i := AnswerImm(t, v)
			var payload []byte
			if full {
				payload = make([]byte, FullLen)
				PutFull(payload, v)
			}
			got, isFull, err := DecodeAnswer(i, payload, high)
			if err != nil {
				return "", err
			}
			return fmt.Sprintf("answer tag=%d value=0x%016x full=%v payload=%x -> imm=0x%08x -> value=0x%016x full=%v confirms(guess)=%v",
				t, v, full, payload, uint32(i), got, isFull, Confirms(GuessOf(high), v)), nil
		}
	}
	hyb := func(ms int64, l uint32) func() (string, error) {
		return func() (string, error) {
			v := HybridValue(ms, l)
			return fmt.Sprintf("hybrid ms=%d logical=%d -> 0x%016x -> %s logical=%d", ms, l, v,
				HybridPhysical(v).UTC().Format("2006-01-02T15:04:05.000Z"), HybridLogical(v)), nil
		}
	}
	return []vector{
		{"req-zero", req(0, 0)},
		{"req-max", req(NumTags-1, NoGuess-1)},
		{"req-noguess", req(1, NoGuess)},
		{"req-mid", req(0xabc, 0x12345)},
		{"ans-confirm", ans(7, 0x0000_0123_4567_89ab, 0x0000_0123_4567_89ab>>LowBits, false)},
		{"ans-full", ans(0xfff, 0xfedc_ba98_7654_3210, 0, true)},
		{"ans-zero", ans(0, 0, 0, false)},
		{"hyb-epoch", hyb(0, 0)},
		{"hyb-2025", hyb(1735689600000, 1)},
		{"hyb-maxlogical", hyb(1735689600123, HybridLogicalMask)},
	}
}

func TestGoldenLayouts(t *testing.T) {
	checkGolden(t, "layouts.golden", "layouts", renderVectors(t, vectors()))
}

func TestRequestImmErrors(t *testing.T) {
	cases := []struct {
		name string
		tag  Tag
		g    Guess
		want error
	}{
		{"tag too big", NumTags, 0, ErrBadTag},
		{"guess too big", 0, NoGuess + 1, ErrBadGuess},
		{"ok", NumTags - 1, NoGuess, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := RequestImm(c.tag, c.g)
			if !errors.Is(err, c.want) {
				t.Fatalf("RequestImm(%v, %v) = %v, want %v", c.tag, c.g, err, c.want)
			}
		})
	}
}

func TestDecodeAnswerErrors(t *testing.T) {
	full := make([]byte, FullLen)
	PutFull(full, 0x1_0000_0001)
	cases := []struct {
		name    string
		imm     Imm
		payload []byte
		high    uint64
		want    error
	}{
		{"short payload", AnswerImm(1, 1), []byte{1, 2, 3}, 0, ErrBadLength},
		{"long payload", AnswerImm(1, 1), make([]byte, 9), 0, ErrBadLength},
		{"low bits disagree", AnswerImm(1, 2), full, 0, ErrMismatch},
		{"high too wide", AnswerImm(1, 1), nil, 1 << HighBits, ErrBadGuess},
		{"full ok", AnswerImm(1, 0x1_0000_0001), full, 0, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := DecodeAnswer(c.imm, c.payload, c.high)
			if !errors.Is(err, c.want) {
				t.Fatalf("DecodeAnswer = %v, want %v", err, c.want)
			}
		})
	}
}

func TestConfirms(t *testing.T) {
	v := uint64(0x0000_0123_4567_89ab)
	if !Confirms(GuessOf(v>>LowBits), v) {
		t.Error("the right guess is not confirmed")
	}
	if Confirms(GuessOf(v>>LowBits)+1, v) {
		t.Error("a wrong guess is confirmed")
	}
	n := uint64(NoGuess) << LowBits // high part ends in the NoGuess bits
	if Confirms(NoGuess, n) {
		t.Error("NoGuess is confirmed")
	}
	if CheckRequestLen(0) != nil || CheckRequestLen(8) == nil {
		t.Error("CheckRequestLen accepts the wrong lengths")
	}
}

// FuzzDecodeAnswer checks that no immediate, payload or high part makes
// the decoders panic, and that what they accept round-trips.
func FuzzDecodeAnswer(f *testing.F) {
	f.Add(uint32(0), []byte{}, uint64(0))
	f.Add(uint32(0xffffffff), []byte{0, 0, 0, 0, 0, 0, 0, 1}, uint64(1))
	f.Add(uint32(0x00712345), []byte{1, 2, 3}, uint64(1)<<HighBits)
	f.Fuzz(func(t *testing.T, imm uint32, payload []byte, high uint64) {
		i := Imm(imm)
		tag, g := DecodeRequest(i)
		if !tag.Valid() || g > NoGuess {
			t.Fatalf("DecodeRequest(%v) = %v %v out of range", i, tag, g)
		}
		if back := MustRequestImm(tag, g); back != i {
			t.Fatalf("request round trip %v -> %v", i, back)
		}
		_ = i.String()
		v, full, err := DecodeAnswer(i, payload, high)
		if err != nil {
			return
		}
		if AnswerImm(tag, v) != i {
			t.Fatalf("answer %v decodes to 0x%x whose immediate is %v", i, v, AnswerImm(tag, v))
		}
		if !full && v>>LowBits != high {
			t.Fatalf("confirmation completed with the wrong high part")
		}
	})
}
