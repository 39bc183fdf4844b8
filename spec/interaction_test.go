package spec

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
)

// TestTraces runs the datadriven traces of the pure machines of
// Spec-S0 (testdata/traces/*.txt), as etcd raft's interaction tests run
// its own: the immediate codec, a client QP's Window (tags, quarantine,
// expiry, late answers), the client's Speculator (guesses and the
// rollover prediction) and the server's Guard. Each file is a script of
// inputs and the outputs they produced; -rewrite regenerates the
// outputs, which are to be reviewed before they are checked in (a trace
// that records a wrong answer is a defect). The commands are listed in
// testdata/traces/README.
func TestTraces(t *testing.T) {
	datadriven.Walk(t, "testdata/traces", func(t *testing.T, path string) {
		if !strings.HasSuffix(path, ".txt") {
			return
		}
		m := &machines{}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			out, err := m.handle(t, d)
			if err != nil {
				t.Fatalf("%s: %v", d.Pos, err)
			}
			if out == "" {
				return "ok\n"
			}
			return out
		})
	})
}

// machines are the pure machines one trace drives.
type machines struct {
	win   *Window
	spec  Speculator
	guard Guard
	b     strings.Builder
}

func (m *machines) printf(format string, args ...any) { fmt.Fprintf(&m.b, format+"\n", args...) }

func (m *machines) handle(t *testing.T, d *datadriven.TestData) (string, error) {
	m.b.Reset()
	a := args{t: t, d: d}
	switch d.Cmd {
	// The immediate codec (imm.go).
	case "request-imm":
		imm, err := RequestImm(Tag(a.uint("tag")), a.guess("guess"))
		if err != nil {
			m.printf("error: %v", err)
			break
		}
		tag, g := DecodeRequest(imm)
		m.printf("%s: decodes to %s %s", imm, tag, g)
	case "answer-imm":
		v := a.value("value")
		imm := AnswerImm(Tag(a.uint("tag")), v)
		m.printf("%s", imm)
		if d.HasArg("guess") {
			if Confirms(a.guess("guess"), v) {
				m.printf("the guess is confirmed: a header-only answer")
			} else {
				m.printf("the guess is not confirmed: the full value follows")
			}
		}
	case "decode-answer":
		imm := Imm(a.uint("imm"))
		var payload []byte
		if d.HasArg("full") {
			payload = make([]byte, FullLen)
			PutFull(payload, a.value("full"))
		}
		if d.HasArg("len") {
			payload = make([]byte, a.uint("len"))
		}
		v, full, err := DecodeAnswer(imm, payload, a.hex("high"))
		switch {
		case err != nil:
			m.printf("error: %v", err)
		case full:
			m.printf("full value %s", fmtValue(v))
		default:
			m.printf("confirmed: %s", fmtValue(v))
		}

	// A client QP's Window (window.go).
	case "window":
		w, err := NewWindow(WindowConfig{Size: int(a.uint("size")), Timeout: a.dur("timeout"), Quarantine: a.dur("quarantine")})
		if err != nil {
			m.printf("error: %v", err)
			break
		}
		m.win = w
		c := w.Config()
		m.printf("window of %d, timeout %v, quarantine %v", c.Size, c.Timeout, c.Quarantine)
	case "send":
		now := a.dur("at")
		for i := range max(a.uint("n"), 1) {
			tag, retry, err := m.win.Send(now, a.uint("cookie")+i)
			switch {
			case errors.Is(err, ErrNoTag):
				m.printf("cookie %d: %v (retry at %v)", a.uint("cookie")+i, err, retry)
			case err != nil:
				m.printf("cookie %d: %v", a.uint("cookie")+i, err)
			default:
				m.printf("cookie %d: sent under %s", a.uint("cookie")+i, tag)
			}
		}
	case "cycle":
		// n requests, each sent and answered at once: the tags go round.
		now, n := a.dur("at"), a.uint("n")
		var first, last Tag
		for i := range n {
			tag, _, err := m.win.Send(now, 1<<32+i)
			if err != nil {
				m.printf("request %d of %d: %v", i+1, n, err)
				return m.b.String(), nil
			}
			if _, _, ok := m.win.Answer(now, tag); !ok {
				return "", fmt.Errorf("the answer to %s was not taken", tag)
			}
			if i == 0 {
				first = tag
			}
			last = tag
		}
		m.printf("%d requests sent and answered, %s..%s", n, first, last)
	case "answer":
		now := a.dur("at")
		by := now
		if d.HasArg("arrived") {
			by = a.dur("arrived")
		}
		tag := Tag(a.uint("tag"))
		cookie, sent, ok, late := m.win.AnswerArrived(now, by, tag)
		switch {
		case ok:
			m.printf("%s answers cookie %d, sent at %v", tag, cookie, sent)
		case late:
			m.printf("%s: late (it arrived at %v, before the request outstanding under it was sent): dropped", tag, by)
		default:
			m.printf("%s: stale (not outstanding): dropped", tag)
		}
	case "cancel":
		tag := Tag(a.uint("tag"))
		if m.win.Cancel(a.dur("at"), tag) {
			m.printf("%s cancelled", tag)
		} else {
			m.printf("%s was not outstanding", tag)
		}
	case "expire":
		for _, e := range m.win.Expire(a.dur("at"), nil) {
			m.printf("expired: cookie %d under %s, sent at %v", e.Cookie, e.Tag, e.Sent)
		}
		fallthrough
	case "window-state":
		m.printf("%d outstanding", m.win.Outstanding())
		if d, ok := m.win.NextDeadline(); ok {
			m.printf("next expiry at %v", d)
		}

	// The client's Speculator (speculate.go).
	case "period":
		m.spec.SetPeriod(a.dur("period"))
		m.printf("period %v", m.spec.Period())
	case "guess":
		for _, at := range a.durs("at") {
			g, high := m.spec.Guess(at)
			if g == NoGuess {
				m.printf("at %v: no guess", at)
			} else {
				m.printf("at %v: %s (high part %x)", at, g, high)
			}
		}
	case "learn":
		m.spec.Learn(a.dur("at"), a.value("value"))
	case "observe":
		m.spec.Observe(a.dur("sent"), a.value("value"))
		if m.spec.phased {
			m.printf("high part %x began at a send time in (%v, %v]", m.spec.base, m.spec.lo, m.spec.hi)
		}
	case "forget":
		m.spec.Forget()

	// The server's Guard (speculate.go).
	case "guard":
		m.guard = NewGuard(a.dur("at"))
		m.printf("confirmations suspended until %v", m.guard.hold)
	case "serve":
		ok := m.guard.Observe(a.dur("at"), a.value("value"))
		m.printf("confirm guesses: %t (jumps %d)", ok, m.guard.Jumps())
	default:
		return "", fmt.Errorf("unknown command %q", d.Cmd)
	}
	return m.b.String(), nil
}

// args reads a command's arguments.
type args struct {
	t *testing.T
	d *datadriven.TestData
}

func (a args) str(key string) string {
	arg, ok := a.d.Arg(key)
	if !ok {
		return ""
	}
	return arg.SingleVal(a.t)
}

func (a args) uint(key string) uint64 {
	s := a.str(key)
	if s == "" {
		return 0
	}
	v, err := strconv.ParseUint(s, 0, 64)
	if err != nil {
		a.t.Fatalf("%s: %s=%q: %v", a.d.Pos, key, s, err)
	}
	return v
}

func (a args) dur(key string) time.Duration {
	s := a.str(key)
	if s == "" {
		return 0
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		a.t.Fatalf("%s: %s=%q: %v", a.d.Pos, key, s, err)
	}
	return v
}

// durs reads key=(1ms, 2ms, ...).
func (a args) durs(key string) []time.Duration {
	arg, ok := a.d.Arg(key)
	if !ok {
		a.t.Fatalf("%s: missing %s", a.d.Pos, key)
	}
	var ds []time.Duration
	for _, s := range arg.Vals {
		v, err := time.ParseDuration(s)
		if err != nil {
			a.t.Fatalf("%s: %s=%q: %v", a.d.Pos, key, s, err)
		}
		ds = append(ds, v)
	}
	return ds
}

// hex reads a number in hex.
func (a args) hex(key string) uint64 {
	v, err := strconv.ParseUint(a.str(key), 16, 64)
	if err != nil {
		a.t.Fatalf("%s: %s: %v", a.d.Pos, key, err)
	}
	return v
}

// guess reads a guess: a high part in hex, or "none".
func (a args) guess(key string) Guess {
	s := a.str(key)
	if s == "none" {
		return NoGuess
	}
	h, err := strconv.ParseUint(s, 16, 64)
	if err != nil {
		a.t.Fatalf("%s: %s=%q: %v", a.d.Pos, key, s, err)
	}
	return GuessOf(h)
}

// value reads a value as high:low in hex (5:00010 is 5<<20 | 0x10).
func (a args) value(key string) uint64 {
	s := a.str(key)
	hs, ls, ok := strings.Cut(s, ":")
	h, err1 := strconv.ParseUint(hs, 16, 64)
	l, err2 := strconv.ParseUint(ls, 16, 32)
	if !ok || err1 != nil || err2 != nil || l > LowMask {
		a.t.Fatalf("%s: %s=%q: want high:low in hex", a.d.Pos, key, s)
	}
	return h<<LowBits | l
}

func fmtValue(v uint64) string { return fmt.Sprintf("%x:%05x", v>>LowBits, v&LowMask) }
