package spec

import (
	"errors"
	"testing"
	"time"
)

func TestERPCCodecRoundTrip(t *testing.T) {
	for _, h := range []ERPCHeader{
		{Op: ERPCOpRequest, Slot: 0, Count: 1, Session: 1, ReqNum: 1},
		{Op: ERPCOpRequest, Slot: ERPCSlots - 1, Count: ERPCMaxRange, Session: 1<<64 - 1, ReqNum: 1<<64 - 1},
		{Op: ERPCOpPing, Session: 9, ReqNum: 3},
	} {
		b := make([]byte, ERPCRequestLen)
		if err := PutERPCHeader(b, h); err != nil {
			t.Fatal(err)
		}
		got, first, err := DecodeERPC(b)
		if err != nil || got != h || first != 0 {
			t.Fatalf("%+v: decoded %+v %d %v", h, got, first, err)
		}
		a := h
		a.Op = ERPCOpAnswer
		if h.Op == ERPCOpPing {
			a.Op = ERPCOpPong
		}
		ab := make([]byte, ERPCAnswerLen)
		if err := PutERPCAnswer(ab, a, 77); err != nil {
			t.Fatal(err)
		}
		if got, first, err := DecodeERPC(ab); err != nil || got != a || first != 77 {
			t.Fatalf("%+v: decoded %+v %d %v", a, got, first, err)
		}
	}
}

func TestERPCCodecRefuses(t *testing.T) {
	good := func() []byte {
		b := make([]byte, ERPCRequestLen)
		PutERPCHeader(b, ERPCHeader{Op: ERPCOpRequest, Slot: 1, Count: 2, Session: 3, ReqNum: 4})
		return b
	}
	for _, c := range []struct {
		name string
		mut  func([]byte) []byte
		want error
	}{
		{"short", func(b []byte) []byte { return b[:10] }, ErrBadLength},
		{"long", func(b []byte) []byte { return append(b, 0) }, ErrBadLength},
		{"version", func(b []byte) []byte { b[0] = 2; return b }, ErrERPCVersion},
		{"opcode", func(b []byte) []byte { b[1] = 9; return b }, ErrERPCOpcode},
		{"reserved", func(b []byte) []byte { b[3] = 1; return b }, ErrERPCOpcode},
		{"slot", func(b []byte) []byte { b[2] = ERPCSlots; return b }, ErrERPCSlot},
		{"count 0", func(b []byte) []byte { b[4], b[5] = 0, 0; return b }, ErrERPCCount},
		{"huge count", func(b []byte) []byte { b[4], b[5] = 0xff, 0xff; return b }, ErrERPCCount},
		{"request number 0", func(b []byte) []byte { clear(b[16:24]); return b }, ErrERPCReqNum},
		{"answer without value", func(b []byte) []byte { b[1] = ERPCOpAnswer; return b }, ErrBadLength},
	} {
		if _, _, err := DecodeERPC(c.mut(good())); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	if err := PutERPCHeader(make([]byte, ERPCRequestLen), ERPCHeader{Op: ERPCOpRequest, Count: ERPCMaxRange + 1, ReqNum: 1}); !errors.Is(err, ErrERPCCount) {
		t.Errorf("encoding a huge count: %v", err)
	}
}

func FuzzDecodeERPC(f *testing.F) {
	b := make([]byte, ERPCAnswerLen)
	PutERPCAnswer(b, ERPCHeader{Op: ERPCOpAnswer, Slot: 2, Count: 3, Session: 4, ReqNum: 5}, 6)
	f.Add(b)
	f.Add(b[:ERPCRequestLen])
	f.Fuzz(func(t *testing.T, b []byte) {
		h, first, err := DecodeERPC(b)
		if err != nil {
			return
		}
		// What decodes encodes back to the same bytes.
		out := make([]byte, len(b))
		if len(b) == ERPCAnswerLen {
			err = PutERPCAnswer(out, h, first)
		} else {
			err = PutERPCHeader(out, h)
		}
		if err != nil || string(out) != string(b) {
			t.Fatalf("%x decoded to %+v %d, encodes to %x (%v)", b, h, first, out, err)
		}
	})
}

// TestERPCServerSlot walks a slot through its states: a request number
// runs once, its copies while it runs are busy, after its answer they
// are resent, a lower number is stale, another count for the number
// answered is a mismatch, an aborted run runs again, and an undone
// answer (never posted) runs again.
func TestERPCServerSlot(t *testing.T) {
	var s ERPCServerSlot
	step := func(rn uint64, k int, want ERPCVerdict) {
		t.Helper()
		if v := s.Receive(rn, k); v != want {
			t.Fatalf("Receive(%d, %d) = %v, want %v", rn, k, v, want)
		}
	}
	step(1, 2, ERPCRun)
	step(1, 2, ERPCBusy)
	s.Done(100)
	step(1, 2, ERPCResend)
	if rn, first, k, ok := s.Answer(); rn != 1 || first != 100 || k != 2 || !ok {
		t.Fatalf("Answer() = %d %d %d %v", rn, first, k, ok)
	}
	step(1, 3, ERPCMismatch)
	step(3, 1, ERPCRun)
	step(2, 1, ERPCStale)
	s.Abort()
	step(3, 1, ERPCRun) // the claim failed: it never ran
	s.Done(200)
	s.Undo() // never posted
	step(3, 1, ERPCRun)
	s.Done(300)
	step(3, 1, ERPCResend)
	if _, first, _, _ := s.Answer(); first != 300 {
		t.Fatalf("answer %d after the rerun, want 300", first)
	}
	s.Done(400) // not running: ignored
	if _, first, _, _ := s.Answer(); first != 300 {
		t.Fatalf("Done outside a run changed the answer to %d", first)
	}
}

// TestERPCClientCredits: a session sends at most min(credits, slots)
// requests; answers give credits back; request numbers of a slot grow;
// a cancelled slot's late answer is unmatched.
func TestERPCClientCredits(t *testing.T) {
	s := NewERPCClientSession(3, 0, 0, 0, 0)
	var slots []int
	for i := range 3 {
		sl, rn, ok := s.Take(0, 1)
		if !ok || rn != 1 {
			t.Fatalf("take %d: %d %d %v", i, sl, rn, ok)
		}
		slots = append(slots, sl)
	}
	if _, _, ok := s.Take(0, 1); ok || s.Room() != 0 {
		t.Fatal("a fourth request with 3 credits")
	}
	if m := s.Answer(1, slots[0], 1, 1, 50); m != ERPCAccepted || s.Room() != 1 {
		t.Fatalf("answer: %v, room %d", m, s.Room())
	}
	if m := s.Answer(1, slots[0], 1, 1, 50); m != ERPCDuplicate {
		t.Fatalf("duplicate answer: %v", m)
	}
	if m := s.Answer(1, slots[0], 1, 1, 51); m != ERPCReanswered {
		t.Fatalf("answer with another value: %v", m)
	}
	sl, rn, _ := s.Take(2, 1)
	if sl != slots[0] || rn != 2 {
		t.Fatalf("slot %d reused with request number %d, want %d and 2", sl, rn, slots[0])
	}
	s.Cancel(slots[1])
	if s.Room() != 1 {
		t.Fatalf("room %d after a cancel", s.Room())
	}
	if m := s.Answer(3, slots[1], 1, 1, 60); m != ERPCUnmatched {
		t.Fatalf("answer to a cancelled request: %v", m)
	}
	if _, rn, _ := s.Take(3, 1); rn != 2 {
		t.Fatalf("slot after a cancel: request number %d, want 2", rn)
	}
	c := NewERPCClientSession(64, 0, 0, 0, 0)
	n := 0
	for ; ; n++ {
		if _, _, ok := c.Take(0, 1); !ok {
			break
		}
	}
	if n != ERPCSlots {
		t.Fatalf("%d requests in flight with 64 credits, want the %d slots", n, ERPCSlots)
	}
}

// TestERPCGoBackN: when the oldest request times out, every request in
// flight is sent again, in the order first sent, and not before.
func TestERPCGoBackN(t *testing.T) {
	const rto = 5 * time.Millisecond
	s := NewERPCClientSession(8, rto, time.Hour, time.Hour, 0)
	a, _, _ := s.Take(0, 1)
	b, _, _ := s.Take(1*time.Millisecond, 1)
	c, _, _ := s.Take(2*time.Millisecond, 1)
	s.Answer(3*time.Millisecond, b, 1, 1, 9) // answered out of order: fine
	if out := s.GoBackN(rto-1, nil); len(out) != 0 {
		t.Fatalf("resent %v before the RTO", out)
	}
	if at, ok := s.NextRTO(); !ok || at != rto {
		t.Fatalf("next RTO %v %v, want %v", at, ok, rto)
	}
	out := s.GoBackN(rto, nil)
	if len(out) != 2 || out[0] != a || out[1] != c {
		t.Fatalf("go-back-N resent slots %v, want [%d %d]", out, a, c)
	}
	if rn, _, ok := s.Request(a); rn != 1 || !ok {
		t.Fatalf("resent under request number %d", rn)
	}
	if out := s.GoBackN(rto+1, nil); len(out) != 0 {
		t.Fatalf("resent %v again before another RTO", out)
	}
	if at, _ := s.NextRTO(); at != 2*rto {
		t.Fatalf("next RTO %v after the resend, want %v", at, 2*rto)
	}
	if s.Room() != 6 {
		t.Fatalf("room %d after go-back-N: credits were not reclaimed and spent again", s.Room())
	}
}

// TestERPCFailureDetection: a session waiting for the server fails
// FailAfter after it last heard from it; a quiet one pings after
// Heartbeat and fails only if the pong never comes; an idle client's
// old ping does not fail its next request at once.
func TestERPCFailureDetection(t *testing.T) {
	const hb, fail = 100 * time.Millisecond, 400 * time.Millisecond
	s := NewERPCClientSession(8, 5*time.Millisecond, hb, fail, 0)
	if s.Failed(time.Hour) {
		t.Fatal("an idle session failed")
	}
	sl, rn, _ := s.Take(10*time.Millisecond, 1)
	if s.Failed(10*time.Millisecond + fail - 1) {
		t.Fatal("failed before FailAfter")
	}
	if !s.Failed(10*time.Millisecond + fail) {
		t.Fatal("not failed FailAfter after the request with nothing heard")
	}
	s.Answer(20*time.Millisecond, sl, rn, 1, 5)
	if _, ok := s.Ping(20*time.Millisecond + hb - 1); ok {
		t.Fatal("pinged before the heartbeat")
	}
	n, ok := s.Ping(20*time.Millisecond + hb)
	if !ok {
		t.Fatal("no ping after a quiet heartbeat")
	}
	if !s.Pong(150*time.Millisecond, n) || s.Failed(150*time.Millisecond+fail-1) {
		t.Fatal("pong not taken")
	}
	n2, _ := s.Ping(150*time.Millisecond + hb)
	if s.Pong(300*time.Millisecond, n2+1) {
		t.Fatal("a pong of another number taken")
	}
	if !s.Failed(150*time.Millisecond + hb + fail) {
		t.Fatal("an unanswered ping did not fail the session")
	}
	// An idle client ran no timers for an hour: its next request
	// starts a fresh wait.
	s.Take(time.Hour, 1)
	if s.Failed(time.Hour + fail - 1) {
		t.Fatal("an old ping failed a new request at once")
	}
	if e := s.NextEvent(); e > time.Hour+5*time.Millisecond {
		t.Fatalf("next event %v, want the RTO", e)
	}
}

// TestERPCClientHeldRequest: a request the rate limiter holds (Hold) is
// not on the wire: no retransmission timer runs for it, go-back-N
// leaves it alone and the session does not wait for the server on its
// account, until Sent starts its timer. Base: a request held past the RTO
// in a congested session's wheel was sent again by go-back-N before it
// was ever sent (the incast rig's CC runs resent 7,735 requests where
// CC off resent 35).
func TestERPCClientHeldRequest(t *testing.T) {
	const rto = 5 * time.Millisecond
	s := NewERPCClientSession(8, rto, 0, 0, 0)
	a, _, _ := s.Take(0, 1) // on the wire at 0
	b, _, _ := s.Take(0, 1)
	s.Hold(b) // held by the limiter
	if at, ok := s.NextRTO(); !ok || at != rto {
		t.Fatalf("NextRTO %v %v, want %v: the held request's timer must not run", at, ok, rto)
	}
	if got := s.GoBackN(rto, nil); len(got) != 1 || got[0] != a {
		t.Fatalf("go-back-N at the RTO resends slots %v, want only the sent one %d", got, a)
	}
	// Only the held request left: nothing on the wire, nothing timed.
	s2 := NewERPCClientSession(8, rto, 0, 0, 0)
	c, _, _ := s2.Take(0, 1)
	s2.Hold(c)
	if _, ok := s2.NextRTO(); ok || s2.Failed(time.Hour) || len(s2.GoBackN(time.Hour, nil)) != 0 {
		t.Fatal("a session with only a held request timed it out or failed")
	}
	s2.Sent(c, 10*rto) // leaves at 50 ms: its timer starts there
	if at, ok := s2.NextRTO(); !ok || at != 11*rto {
		t.Fatalf("NextRTO after Sent at %v: %v %v, want %v", 10*rto, at, ok, 11*rto)
	}
	if s2.Failed(10*rto + s2.FailAfter - 1) {
		t.Fatal("failed before FailAfter from the send")
	}
}
