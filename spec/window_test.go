package spec

import (
	"errors"
	"math/rand/v2"
	"testing"
	"time"
)

// refWindow is the deliberately simple reference for Window: maps and
// linear scans, the same policy stated plainly.
type refWindow struct {
	cfg      WindowConfig
	next     Tag
	out      map[Tag]refReq
	order    []Tag // outstanding, in send order
	released map[Tag]time.Duration
}

type refReq struct {
	cookie  uint64
	sent    time.Duration
	backoff int
}

// timeout is Timeout doubled b times, capped at MaxTimeout.
func (r *refWindow) timeout(b int) time.Duration {
	d := r.cfg.Timeout
	for range b {
		d = min(2*d, r.cfg.MaxTimeout)
	}
	return d
}

func newRef(cfg WindowConfig) *refWindow {
	return &refWindow{cfg: cfg, out: map[Tag]refReq{}, released: map[Tag]time.Duration{}}
}

func (r *refWindow) send(now time.Duration, cookie uint64, backoff int) (Tag, error) {
	if len(r.out) >= r.cfg.Size {
		return 0, ErrWindowFull
	}
	for {
		t := r.next
		r.next = (r.next + 1) % NumTags
		if _, busy := r.out[t]; busy {
			continue
		}
		if rel, ok := r.released[t]; ok && now-rel < r.cfg.Quarantine {
			r.next = t
			return 0, ErrNoTag
		}
		r.out[t] = refReq{cookie, now, backoff}
		r.order = append(r.order, t)
		return t, nil
	}
}

func (r *refWindow) drop(t Tag, now time.Duration) {
	delete(r.out, t)
	r.released[t] = now
	for i, o := range r.order {
		if o == t {
			r.order = append(r.order[:i], r.order[i+1:]...)
			return
		}
	}
}

func (r *refWindow) answer(now, by time.Duration, t Tag) (uint64, bool) {
	q, ok := r.out[t]
	if !ok || by < q.sent { // arrived before its request left: an older use's
		return 0, false
	}
	r.drop(t, now)
	return q.cookie, true
}

func (r *refWindow) expire(now time.Duration) []Expired {
	var ex []Expired
	for _, t := range append([]Tag(nil), r.order...) {
		if q := r.out[t]; now-q.sent >= r.timeout(q.backoff) {
			ex = append(ex, Expired{Tag: t, Cookie: q.cookie, Sent: q.sent, Backoff: q.backoff})
			r.drop(t, now)
		}
	}
	return ex
}

func TestWindowDifferential(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		cfg := WindowConfig{Size: 1 + int(seed%16)*8, Timeout: 3 * time.Millisecond, Quarantine: 20 * time.Millisecond}
		if seed%5 == 0 {
			cfg.Size = MaxWindow
		}
		if seed%3 == 0 {
			cfg.MaxTimeout = 5 * cfg.Timeout // a cap that is no power of two of it
		}
		w, err := NewWindow(cfg)
		if err != nil {
			t.Fatal(err)
		}
		ref := newRef(w.Config())
		rng := rand.New(rand.NewPCG(seed, 99))
		var now time.Duration
		var cookie uint64
		var sent []Tag
		var dst []Expired
		for step := range 200000 {
			now += time.Duration(rng.IntN(3000)) * time.Nanosecond
			switch op := rng.IntN(10); {
			case op < 5:
				cookie++
				backoff := 0 // none, or (one in eight) some
				if rng.IntN(8) == 0 {
					backoff = 1 + rng.IntN(4)
				}
				got, _, gerr := w.SendBackoff(now, cookie, backoff)
				want, werr := ref.send(now, cookie, backoff)
				if !errors.Is(gerr, werr) || (gerr == nil && got != want) {
					t.Fatalf("seed %d step %d: Send = %v,%v; reference %v,%v", seed, step, got, gerr, want, werr)
				}
				if gerr == nil {
					sent = append(sent, got)
				}
			case op < 9 && len(sent) > 0:
				// answer a tag sent recently, or a random one (stale, duplicate)
				var tag Tag
				if rng.IntN(4) == 0 {
					tag = Tag(rng.IntN(NumTags + 2))
				} else {
					tag = sent[len(sent)-1-rng.IntN(min(len(sent), 64))]
				}
				// arrived by now, or (an answer held up on the client's
				// side) up to a few sends earlier
				by := now - time.Duration(rng.IntN(4))*time.Duration(rng.IntN(3000))*time.Nanosecond
				gc, _, gok, _ := w.AnswerArrived(now, by, tag)
				wc, wok := ref.answer(now, by, tag)
				if gok != wok || gc != wc {
					t.Fatalf("seed %d step %d: AnswerArrived(%v, %v) = %d,%v; reference %d,%v", seed, step, by, tag, gc, gok, wc, wok)
				}
			default:
				dst = w.Expire(now, dst[:0])
				want := ref.expire(now)
				if len(dst) != len(want) {
					t.Fatalf("seed %d step %d: Expire gave %d, reference %d", seed, step, len(dst), len(want))
				}
				for i := range want {
					if dst[i] != want[i] {
						t.Fatalf("seed %d step %d: Expire[%d] = %+v, reference %+v", seed, step, i, dst[i], want[i])
					}
				}
			}
			if w.Outstanding() != len(ref.out) {
				t.Fatalf("seed %d step %d: %d outstanding, reference %d", seed, step, w.Outstanding(), len(ref.out))
			}
			if step%64 != 0 {
				continue
			}
			got, gok := w.NextDeadline()
			var want time.Duration
			for _, q := range ref.out {
				if d := q.sent + ref.timeout(q.backoff); len(ref.out) > 0 && (want == 0 || d < want) {
					want = d
				}
			}
			if gok != (len(ref.out) > 0) || got != want {
				t.Fatalf("seed %d step %d: NextDeadline = %v,%v; reference %v", seed, step, got, gok, want)
			}
		}
	}
}

// TestWindowBackoff: a request whose answers take longer than the
// timeout is answered once it backs off, one step for each answer to an
// expired copy. Without it no answer is ever taken; and a request whose copies are lost, with no answer at all,
// does not back off.
func TestWindowBackoff(t *testing.T) {
	const delay = 25 * time.Millisecond // every answer's, over the 20 ms timeout
	run := func(backoff bool, lost bool) (answeredAt time.Duration, copies int, timeouts []time.Duration) {
		w, err := NewWindow(WindowConfig{Size: 1, Timeout: 20 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		type answer struct {
			at  time.Duration
			tag Tag
		}
		var inFlight []answer
		level := 0
		send := func(now time.Duration) {
			tag, _, err := w.SendBackoff(now, 7, level)
			if err != nil {
				t.Fatal(err)
			}
			copies++
			timeouts = append(timeouts, w.Config().TimeoutOf(level))
			if !lost {
				inFlight = append(inFlight, answer{now + delay, tag})
			}
		}
		send(0)
		for now := time.Duration(0); now < 2*time.Second; now += time.Millisecond {
			for len(inFlight) > 0 && inFlight[0].at <= now {
				a := inFlight[0]
				inFlight = inFlight[1:]
				cookie, _, ok, late := w.AnswerArrived(now, a.at, a.tag)
				if ok {
					if cookie != 7 {
						t.Fatalf("cookie %d", cookie)
					}
					return now, copies, timeouts
				}
				if c, b, slow := w.ExpiredAnswer(a.tag); backoff && !late && slow && c == 7 {
					level = max(level, b+1)
				}
				if _, _, again := w.ExpiredAnswer(a.tag); again {
					t.Fatal("ExpiredAnswer reported a copy twice")
				}
			}
			for _, e := range w.Expire(now, nil) {
				if e.Cookie != 7 || e.Sent+w.Config().TimeoutOf(e.Backoff) > now {
					t.Fatalf("expired %+v at %v", e, now)
				}
				send(now)
			}
		}
		return 0, copies, timeouts
	}
	// 0: sent (20 ms); 20: again (20 ms); 25: the first copy's answer,
	// stale; 40: again (40 ms); 45: the second's, stale; 65: the third's,
	// taken.
	if at, n, _ := run(true, false); at != 65*time.Millisecond || n != 3 {
		t.Errorf("backing off: answered at %v after %d copies, want 65ms after 3", at, n)
	}
	if at, n, _ := run(false, false); at != 0 || n < 90 {
		t.Errorf("the model is off: with a fixed timeout answered at %v after %d copies", at, n)
	}
	if _, n, timeouts := run(true, true); n < 90 || timeouts[n-1] != 20*time.Millisecond {
		t.Errorf("lost copies backed off: %d copies, the last waiting %v", n, timeouts[n-1])
	}

	cfg, err := WindowConfig{Size: 1, Timeout: 20 * time.Millisecond}.Validate()
	if err != nil {
		t.Fatal(err)
	}
	for b, want := range []time.Duration{20, 40, 80, 160, 320, 640, 1280, 1280} {
		if got := cfg.TimeoutOf(b); got != want*time.Millisecond {
			t.Errorf("TimeoutOf(%d) = %v, want %vms", b, got, want)
		}
	}
	if got := cfg.TimeoutOf(1 << 30); got != cfg.MaxTimeout {
		t.Errorf("TimeoutOf(huge) = %v", got)
	}
	cfg.MaxTimeout = 100 * time.Millisecond
	if got := cfg.TimeoutOf(3); got != 100*time.Millisecond {
		t.Errorf("TimeoutOf(3) capped at 100ms = %v", got)
	}
	if _, err := (WindowConfig{Size: 1, Timeout: time.Second, MaxTimeout: time.Millisecond}).Validate(); err == nil {
		t.Error("a max timeout under the timeout was accepted")
	}

	// A request sent without backoff after a backed-off one expires on
	// its own time.
	w, err := NewWindow(WindowConfig{Size: 2, Timeout: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	slow, _, _ := w.SendBackoff(0, 1, 3)
	fresh, _, _ := w.Send(time.Millisecond, 2)
	if d, _ := w.NextDeadline(); d != 21*time.Millisecond {
		t.Fatalf("next deadline %v, want 21ms (the fresh one's)", d)
	}
	if ex := w.Expire(21*time.Millisecond, nil); len(ex) != 1 || ex[0].Tag != fresh || ex[0].Backoff != 0 {
		t.Fatalf("expired %+v, want the fresh one alone", ex)
	}
	if d, _ := w.NextDeadline(); d != 160*time.Millisecond {
		t.Fatalf("next deadline %v, want 160ms (the backed-off one's)", d)
	}
	if ex := w.Expire(160*time.Millisecond, nil); len(ex) != 1 || ex[0].Tag != slow || ex[0].Backoff != 3 {
		t.Fatalf("expired %+v, want the backed-off one", ex)
	}
	// An answer to a request answered, or cancelled, is no evidence.
	a, _, _ := w.Send(200*time.Millisecond, 3)
	w.Answer(201*time.Millisecond, a)
	if _, _, ok := w.ExpiredAnswer(a); ok {
		t.Error("a duplicate of an answer taken counted as slow")
	}
}

func TestWindowQuarantine(t *testing.T) {
	w, err := NewWindow(WindowConfig{Size: 1, Timeout: time.Millisecond, Quarantine: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Duration(0)
	seen := map[Tag]time.Duration{}
	for i := range 3 * NumTags {
		tag, retry, err := w.Send(now, uint64(i))
		if errors.Is(err, ErrNoTag) {
			if retry <= now {
				t.Fatalf("retry %v not after now %v", retry, now)
			}
			now = retry
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if last, ok := seen[tag]; ok && now-last < 20*time.Millisecond {
			t.Fatalf("%v reused %v after its release", tag, now-last)
		}
		if _, _, ok := w.Answer(now, tag); !ok {
			t.Fatalf("answer to outstanding %v rejected", tag)
		}
		if _, _, ok := w.Answer(now, tag); ok {
			t.Fatalf("duplicate answer to %v accepted", tag)
		}
		seen[tag] = now
		now += time.Microsecond
	}
}

// TestWindowAnswerArrivedBeforeReuse (issue 26, item 7): an answer to
// the first use of a tag that is held up past the quarantine on the
// client's side (its socket buffer, its CQ, a stalled poller), and known
// to have arrived before the tag's reuse was sent, is rejected as late:
// Answer alone would complete the reuse with it. The reuse's own answer
// is still accepted, even one known to have arrived only by the moment
// it was sent.
func TestWindowAnswerArrivedBeforeReuse(t *testing.T) {
	const q = MaxAnswerDelay
	w, err := NewWindow(WindowConfig{Size: 1, Timeout: time.Millisecond, Quarantine: q})
	if err != nil {
		t.Fatal(err)
	}
	first, _, err := w.Send(0, 1)
	if err != nil {
		t.Fatal(err)
	}
	w.Expire(time.Millisecond, nil) // released at 1 ms, unanswered
	// Go round the tag space, each use answered at once, until the first
	// tag is handed out again, after its quarantine.
	now := 2 * q
	var reuse time.Duration
	for i := range NumTags {
		tag, _, err := w.Send(now, uint64(100+i))
		if err != nil {
			t.Fatal(err)
		}
		if tag == first {
			reuse = now
			break
		}
		if _, _, ok := w.Answer(now, tag); !ok {
			t.Fatal("answer rejected")
		}
		now += time.Microsecond
	}
	if reuse == 0 {
		t.Fatal("tag never reused")
	}
	// The first use's answer arrived at 3 ms (held up since), polled now.
	now += 10 * time.Millisecond
	if _, _, ok, late := w.AnswerArrived(now, 3*time.Millisecond, first); ok || !late {
		t.Fatalf("an answer that arrived before its tag's reuse was sent: ok %v late %v", ok, late)
	}
	if w.Outstanding() != 1 {
		t.Fatal("the reuse is no longer outstanding")
	}
	cookie, sent, ok, late := w.AnswerArrived(now, reuse, first)
	if !ok || late || cookie != uint64(100+NumTags-1) || sent != reuse {
		t.Fatalf("the reuse's own answer: cookie %d sent %v ok %v late %v", cookie, sent, ok, late)
	}
}

func TestWindowConfigErrors(t *testing.T) {
	for _, c := range []WindowConfig{
		{Size: 0},
		{Size: MaxWindow + 1},
		{Size: 1, Timeout: time.Microsecond, Quarantine: time.Microsecond},
		{Size: 1, Timeout: -time.Millisecond},
		{Size: 1, Quarantine: -time.Millisecond},
	} {
		if _, err := NewWindow(c); err == nil {
			t.Errorf("NewWindow(%+v) accepted", c)
		}
	}
}

// TestWindowQuarantineBound is defect 5 of issue 12: a quarantine shorter
// than MaxAnswerDelay is refused whatever the timeout, because a tag
// released by its first answer (not by timeout) can still see a late
// duplicate answer up to MaxAnswerDelay after its send. The scenario
// below is the one the bound protects: with such a quarantine a late
// answer to the first use would be accepted as the answer to the reuse.
func TestWindowQuarantineBound(t *testing.T) {
	for _, c := range []WindowConfig{
		{Size: 1, Timeout: DefaultTimeout, Quarantine: MaxAnswerDelay - DefaultTimeout/4},
		{Size: 1, Timeout: MaxAnswerDelay, Quarantine: time.Nanosecond},
		{Size: 1, Timeout: 2 * MaxAnswerDelay, Quarantine: MaxAnswerDelay - time.Nanosecond},
	} {
		if c.Quarantine <= 0 || c.Quarantine >= MaxAnswerDelay {
			t.Fatalf("bad case %+v", c)
		}
		if _, err := NewWindow(c); err == nil {
			t.Errorf("NewWindow(%+v) accepted a quarantine shorter than MaxAnswerDelay %v", c, MaxAnswerDelay)
		}
	}
	ok := WindowConfig{Size: 1, Timeout: 2 * MaxAnswerDelay, Quarantine: MaxAnswerDelay}
	w, err := NewWindow(ok)
	if err != nil {
		t.Fatalf("NewWindow(%+v): %v", ok, err)
	}
	// Send at 0, answered at once: the tag may still see a duplicate
	// answer until MaxAnswerDelay. Size 1 cycles through every tag, so
	// reuse of tag 0 comes NumTags sends later; run the clock so that
	// the reuse is attempted before MaxAnswerDelay has passed.
	first, _, err := w.Send(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	w.Answer(0, first)
	step := MaxAnswerDelay / (2 * NumTags)
	now := time.Duration(0)
	for i := 1; i < NumTags; i++ {
		now += step
		tag, _, err := w.Send(now, uint64(i))
		if err != nil {
			t.Fatal(err)
		}
		w.Answer(now, tag)
	}
	now += step
	if tag, _, err := w.Send(now, 1); err == nil && tag == first && now < MaxAnswerDelay {
		t.Fatalf("tag %v reused %v after a send whose answers can arrive until %v", tag, now, MaxAnswerDelay)
	}
}

func TestSpeculator(t *testing.T) {
	var s Speculator
	if g, _ := s.Guess(0); g != NoGuess {
		t.Fatalf("fresh speculator guesses %v", g)
	}
	v := uint64(0x1234_5678_9abc)
	s.Learn(time.Second, v)
	g, high := s.Guess(time.Second + time.Millisecond)
	if !Confirms(g, v) || high != v>>LowBits {
		t.Fatalf("guess %v high 0x%x does not match 0x%x", g, high, v)
	}
	s.Learn(1500*time.Millisecond, v-1<<LowBits) // older knowledge does not win
	if _, h := s.Guess(1500 * time.Millisecond); h != v>>LowBits {
		t.Fatalf("knowledge moved backwards to 0x%x", h)
	}
	if g, _ := s.Guess(time.Second + GuessFreshness); g != NoGuess {
		t.Fatalf("stale knowledge still guessed: %v", g)
	}
}

func TestGuard(t *testing.T) {
	g := NewGuard(0)
	v := uint64(1) << 50
	if g.Observe(time.Second, v) {
		t.Fatal("confirmations allowed during the start holdoff")
	}
	if !g.Observe(Holdoff, v+1) {
		t.Fatal("confirmations suspended after the holdoff")
	}
	now := Holdoff + time.Millisecond
	if g.Observe(now, v+JumpUnits+2) {
		t.Fatal("a jump did not suspend confirmations")
	}
	if g.Jumps() != 1 {
		t.Fatalf("jumps = %d", g.Jumps())
	}
	// steady advance below JumpUnits per period never suspends
	now += Holdoff
	cur := v + JumpUnits + 2
	for range 100 {
		now += GuardPeriod
		cur += JumpUnits / 2
		if !g.Observe(now, cur) {
			t.Fatal("steady advance suspended confirmations")
		}
	}
}
