package spec

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/seqd/seqd/verbs/rocev2"
)

// fasstVectors are the golden cases of the FaSST layouts and of whole
// frames (UD SEND Only, opcode 0x64, no immediate) of one request and its
// answer; each renders to one line of testdata/fasst.golden.
func fasstVectors() []vector {
	req := func(k int, id FaSSTID) func() (string, error) {
		return func() (string, error) {
			b := make([]byte, FaSSTRequestLen)
			if err := PutFaSSTRequest(b, k, id); err != nil {
				return "", err
			}
			h, err := DecodeFaSSTRequest(b)
			if err != nil {
				return "", err
			}
			return fmt.Sprintf("request k=%d id=%s -> %x -> op%d k=%d %s", k, id, b, h.Op, h.Count, h.ID), nil
		}
	}
	ans := func(k int, id FaSSTID, first uint64) func() (string, error) {
		return func() (string, error) {
			b := make([]byte, FaSSTAnswerLen)
			if err := PutFaSSTAnswer(b, k, id, first); err != nil {
				return "", err
			}
			h, v, err := DecodeFaSSTAnswer(b)
			if err != nil {
				return "", err
			}
			return fmt.Sprintf("answer k=%d id=%s first=0x%016x -> %x -> op%d k=%d %s first=0x%016x last=0x%016x",
				k, id, first, b, h.Op, h.Count, h.ID, v, v+uint64(h.Count)-1), nil
		}
	}
	frame := func(src, dst uint16, destQP, psn, srcQP uint32, payload func([]byte) error, n int) func() (string, error) {
		return func() (string, error) {
			p := make([]byte, n)
			if err := payload(p); err != nil {
				return "", err
			}
			a, b := wireClient, wireServer
			if src != 0 {
				a, b = wireServer, wireClient
			}
			f := flowOf(a, b)
			pk := rocev2.Packet{Opcode: rocev2.UDSendOnly, PKey: rocev2.DefaultPKey, DestQP: destQP, PSN: psn,
				QKey: wireQKey, SrcQP: srcQP, Payload: p}
			fr, err := rocev2.AppendFrame(nil, &rocev2.Frame{TTL: 64, Flow: f, Packet: pk})
			if err != nil {
				return "", err
			}
			tr := fr[rocev2.IPv4HeaderLen+rocev2.UDPHeaderLen:]
			got := make([]byte, len(tr))
			hl := pk.EncodeHeaders(got, 0)
			copy(got[hl:], p)
			rocev2.PutICRC(&f, got)
			if !bytes.Equal(got, tr) {
				return "", fmt.Errorf("provider encoder %x, AppendFrame %x", got, tr)
			}
			if !rocev2.VerifyICRC(&f, tr) {
				return "", errors.New("ICRC does not verify")
			}
			if got, want := icrcAsWritten(fr), binary.LittleEndian.Uint32(fr[len(fr)-4:]); got != want {
				return "", fmt.Errorf("ICRC by PROTOCOL.md's recipe 0x%08x, encoder 0x%08x", got, want)
			}
			return fmt.Sprintf("%s -> %x", describeSend(tr), fr), nil
		}
	}
	return []vector{
		{"fasst-req-one", req(1, 0x00000011)},
		{"fasst-req-many", req(16, 0x00abc003)},
		{"fasst-req-max", req(FaSSTMaxCount, 0xffffffff)},
		{"fasst-ans-one", ans(1, 0x00000011, 0x06507ca5f0000001)},
		{"fasst-ans-many", ans(16, 0x00abc003, 0x06507ca5f0000010)},
		{"fasst-ans-max", ans(FaSSTMaxCount, 0xffffffff, 0xfedcba9876540000)},
		{"fasst-req-range", req(FaSSTMaxRange, 0x00000042)},
		{"fasst-ans-range", ans(FaSSTMaxRange, 0x00000042, 0x06507ca5f0000000)},
		{"fasst-request-frame", frame(0, 0, wireReqQPN, 5, wireClientQPN,
			func(b []byte) error { return PutFaSSTRequest(b, 3, 0x00000102) }, FaSSTRequestLen)},
		{"fasst-answer-frame", frame(1, 0, wireClientQPN, 0, wireRespQPN,
			func(b []byte) error { return PutFaSSTAnswer(b, 3, 0x00000102, 0x06507ca5f0000001) }, FaSSTAnswerLen)},
	}
}

// describeSend prints a UD SEND (no immediate) field by field.
func describeSend(b []byte) string {
	return fmt.Sprintf("bth=%x [opcode=0x%02x pkey=0x%04x destqp=0x%06x psn=0x%06x] deth=%x [qkey=0x%08x srcqp=0x%06x] payload=%x icrc=%x",
		b[:12], b[0], binary.BigEndian.Uint16(b[2:]), binary.BigEndian.Uint32(b[4:])&0xffffff,
		binary.BigEndian.Uint32(b[8:])&0xffffff, b[12:20], binary.BigEndian.Uint32(b[12:]),
		binary.BigEndian.Uint32(b[16:])&0xffffff, b[20:len(b)-4], b[len(b)-4:])
}

func TestGoldenFaSST(t *testing.T) {
	checkGolden(t, "fasst.golden", "FaSST layouts", renderVectors(t, fasstVectors()))
}

func TestFaSSTDecodeErrors(t *testing.T) {
	good := make([]byte, FaSSTAnswerLen)
	if err := PutFaSSTAnswer(good, 2, 7, 100); err != nil {
		t.Fatal(err)
	}
	goodReq := make([]byte, FaSSTRequestLen)
	if err := PutFaSSTRequest(goodReq, 2, 7); err != nil {
		t.Fatal(err)
	}
	mod := func(b []byte, f func([]byte)) []byte {
		c := bytes.Clone(b)
		f(c)
		return c
	}
	for _, c := range []struct {
		name string
		b    []byte
		req  bool
		want error
	}{
		{"answer-short", good[:FaSSTAnswerLen-1], false, ErrBadLength},
		{"answer-long", append(bytes.Clone(good), 0), false, ErrBadLength},
		{"answer-version", mod(good, func(b []byte) { b[0] = 2 }), false, ErrFaSSTVersion},
		{"answer-is-request", mod(good, func(b []byte) { b[1] = FaSSTOpRequest }), false, ErrFaSSTOpcode},
		{"answer-count-0", mod(good, func(b []byte) { b[2], b[3] = 0, 0 }), false, ErrFaSSTCount},
		{"answer-count-big", mod(good, func(b []byte) { binary.BigEndian.PutUint16(b[2:], FaSSTMaxRange+1) }), false, ErrFaSSTCount},
		{"request-answer-len", good, true, ErrBadLength},
		{"request-empty", nil, true, ErrBadLength},
		{"request-is-answer", mod(goodReq, func(b []byte) { b[1] = FaSSTOpAnswer }), true, ErrFaSSTOpcode},
		{"request-count-0", mod(goodReq, func(b []byte) { b[2], b[3] = 0, 0 }), true, ErrFaSSTCount},
		{"request-count-big", mod(goodReq, func(b []byte) { binary.BigEndian.PutUint16(b[2:], FaSSTMaxRange+1) }), true, ErrFaSSTCount},
		{"request-count-max16", mod(goodReq, func(b []byte) { b[2], b[3] = 0xff, 0xff }), true, ErrFaSSTCount},
	} {
		t.Run(c.name, func(t *testing.T) {
			var err error
			if c.req {
				_, err = DecodeFaSSTRequest(c.b)
			} else {
				_, _, err = DecodeFaSSTAnswer(c.b)
			}
			if !errors.Is(err, c.want) {
				t.Fatalf("got %v, want %v", err, c.want)
			}
		})
	}
	if err := PutFaSSTRequest(make([]byte, 8), 0, 1); !errors.Is(err, ErrFaSSTCount) {
		t.Errorf("count 0 encoded: %v", err)
	}
	if err := PutFaSSTAnswer(make([]byte, 8), 1, 1, 1); !errors.Is(err, ErrBadLength) {
		t.Errorf("short answer buffer: %v", err)
	}
}

// TestCrossesMillisecond: the hybrid range rule, at the edges of a
// millisecond.
func TestCrossesMillisecond(t *testing.T) {
	const ms = uint64(HybridMillisecond)
	for _, c := range []struct {
		first uint64
		k     int
		want  bool
	}{
		{5 * ms, 1, false},
		{6*ms - 1, 1, false},
		{6*ms - 1, 2, true},
		{6*ms - 2, 2, false},
		{5 * ms, HybridMillisecond, false},
		{5*ms + 1, HybridMillisecond, true},
		{6*ms - FaSSTMaxRange, FaSSTMaxRange, false},
		{6*ms - FaSSTMaxRange + 1, FaSSTMaxRange, true},
	} {
		if got := CrossesMillisecond(c.first, c.k); got != c.want {
			t.Errorf("CrossesMillisecond(%d ms + %d, %d) = %v, want %v", c.first/ms, c.first%ms, c.k, got, c.want)
		}
	}
}

func TestFaSSTSlots(t *testing.T) {
	s, err := NewFaSSTSlots(3)
	if err != nil {
		t.Fatal(err)
	}
	a, ida, _ := s.Take(2)
	b, idb, _ := s.Take(1)
	defer s.Release(b)
	if a == b || ida == idb {
		t.Fatalf("two takes share slot %d/%d or ID %s/%s", a, b, ida, idb)
	}
	if _, ok := s.Match(ida, 1); ok {
		t.Error("matched with the wrong count")
	}
	old := ida
	ida = s.Renew(a, 2)
	if ida == old {
		t.Fatal("Renew kept the ID")
	}
	if _, ok := s.Match(old, 2); ok {
		t.Error("an answer to the earlier transmission matched")
	}
	if got, ok := s.Match(ida, 2); !ok || got != a {
		t.Errorf("current ID: slot %d ok %v", got, ok)
	}
	s.Release(a)
	if _, ok := s.Match(ida, 2); ok {
		t.Error("a released slot matched")
	}
	_, idc, _ := s.Take(2)
	_, idd, _ := s.Take(2)
	if _, _, ok := s.Take(1); ok {
		t.Error("took a fourth slot of three")
	}
	for _, id := range []FaSSTID{ida, old} {
		if _, ok := s.Match(id, 2); ok {
			t.Errorf("stale %s matched after the slot was taken again", id)
		}
	}
	if _, ok := s.Match(idc, 2); !ok {
		t.Error("c")
	}
	if _, ok := s.Match(idd, 2); !ok {
		t.Error("d")
	}
	if _, ok := s.Match(FaSSTID(3), 2); ok { // slot 3 of 3 (mask 0b11)
		t.Error("matched a slot beyond the table")
	}
}

// TestFaSSTSlotsDifferential drives the table and a dumb reference (a
// map of the current ID of every busy slot) with the same random
// operations: they must agree on every match.
func TestFaSSTSlotsDifferential(t *testing.T) {
	for _, n := range []int{1, 2, 5, 16, 100} {
		rng := rand.New(rand.NewPCG(uint64(n), 9))
		s, err := NewFaSSTSlots(n)
		if err != nil {
			t.Fatal(err)
		}
		ref := map[FaSSTID]int{} // current ID -> count
		var sent []FaSSTID       // every ID ever sent
		busy := map[int]FaSSTID{}
		for range 20000 {
			switch op := rng.IntN(4); {
			case op == 0:
				k := 1 + rng.IntN(4)
				slot, id, ok := s.Take(k)
				if ok != (len(busy) < n) {
					t.Fatalf("n=%d take ok=%v with %d busy", n, ok, len(busy))
				}
				if !ok {
					continue
				}
				if _, dup := ref[id]; dup {
					t.Fatalf("ID %s handed out twice", id)
				}
				ref[id], busy[slot] = k, id
				sent = append(sent, id)
			case op == 1 && len(busy) > 0:
				for slot, id := range busy {
					k := 1 + rng.IntN(4)
					delete(ref, id)
					nid := s.Renew(slot, k)
					ref[nid], busy[slot] = k, nid
					sent = append(sent, nid)
					break
				}
			case op == 2 && len(busy) > 0:
				for slot, id := range busy {
					delete(ref, id)
					delete(busy, slot)
					s.Release(slot)
					break
				}
			case len(sent) > 0:
				id := sent[rng.IntN(len(sent))]
				k := 1 + rng.IntN(4)
				_, ok := s.Match(id, k)
				want, live := ref[id]
				if ok != (live && want == k) {
					t.Fatalf("n=%d match %s k=%d: table %v, reference live=%v count=%d", n, id, k, ok, live, want)
				}
			}
		}
	}
}

func FuzzFaSSTDecode(f *testing.F) {
	b := make([]byte, FaSSTAnswerLen)
	PutFaSSTAnswer(b, 3, 9, 1<<40)
	f.Add(b)
	f.Add(b[:FaSSTRequestLen])
	f.Fuzz(func(t *testing.T, b []byte) {
		if h, err := DecodeFaSSTRequest(b); err == nil {
			c := make([]byte, FaSSTRequestLen)
			if PutFaSSTRequest(c, h.Count, h.ID) != nil || !bytes.Equal(c, b) {
				t.Fatalf("request %x decodes to %+v, which encodes to %x", b, h, c)
			}
		}
		if h, v, err := DecodeFaSSTAnswer(b); err == nil {
			c := make([]byte, FaSSTAnswerLen)
			if PutFaSSTAnswer(c, h.Count, h.ID, v) != nil || !bytes.Equal(c, b) {
				t.Fatalf("answer %x decodes to %+v %d, which encodes to %x", b, h, v, c)
			}
		}
	})
}
