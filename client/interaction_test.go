package client

import (
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/seqd/seqd/spec"
	"github.com/seqd/seqd/verbs"
)

// TestEngineTraces runs the engine's datadriven traces
// (testdata/engine/*.txt), as etcd raft's interaction_test.go runs its
// own: each file is a script of inputs to the engine, a pure state
// machine, and the outputs each input produced, checked byte for byte.
// The engine drives the real Spec-S0 transport (specS0: its windows, tags,
// quarantine, speculation and answer decoding) with the verbs calls cut
// off: what it posts is captured (Flush), and the answers the script
// makes the server send are handed to its answer matching (Poll). A mode
// switch moves the engine to "plain", a fake transport whose requests
// carry sequence numbers (the shape of the RC and RPC modes).
//
// Regenerate the outputs with go test ./client/ -run TestEngineTraces
// -rewrite, and review the diff: a trace that records a wrong answer is
// a defect. The commands are described in testdata/engine/README.
func TestEngineTraces(t *testing.T) {
	datadriven.Walk(t, "testdata/engine", func(t *testing.T, path string) {
		if !strings.HasSuffix(path, ".txt") {
			return
		}
		env := newTraceEnv(t)
		datadriven.RunTest(t, path, env.handle)
	})
}

// traceEnv drives one engine through a script.
type traceEnv struct {
	t      *testing.T
	e      engine
	st     stats
	maxRet atomic.Uint64
	pool   sync.Pool
	opts   options
	start  time.Time
	now    time.Duration
	out    strings.Builder

	s0    *s0Wire    // the Spec-S0 data path (kept across reconnects, as dialSpecS0 keeps its QPs)
	plain *plainWire // the plain one, while in that mode
	calls map[string]*traceCall
	byReq map[*Request]*traceCall
	pkts  []*tracePkt // packet n is pkts[n-1]
	quiet bool        // burn: record packets without printing them
}

type traceCall struct {
	name  string
	r     Request
	sends int
}

// tracePkt is a request on the wire.
type tracePkt struct {
	n      int
	call   *traceCall
	tr     transport // sent on
	qp     int       // spec-s0: QP, tag and guess
	tag    spec.Tag
	guess  spec.Guess
	seq    uint64 // plain: sequence number
	sentAt time.Duration
	// dropped: lost on the way (never answered); answered: the server
	// answered it (once: a server answers each request it gets once).
	dropped, answered bool
}

// inbound is an answer on its way to the client, delivered by the next
// step's poll.
type inbound struct {
	p       *tracePkt
	imm     spec.Imm
	payload []byte
	value   uint64
	by      time.Duration // arrived no later than this (-1: at delivery)
}

func newTraceEnv(t *testing.T) *traceEnv {
	env := &traceEnv{t: t, start: time.Now(), calls: map[string]*traceCall{}, byReq: map[*Request]*traceCall{}}
	if err := env.opts.validate(); err != nil {
		t.Fatal(err)
	}
	env.e.init(engineEnv{st: &env.st, maxRet: &env.maxRet, pool: &env.pool,
		log: slog.New(slog.DiscardHandler), defTimeout: env.opts.timeout, start: env.start})
	return env
}

func (env *traceEnv) printf(format string, args ...any) {
	if !env.quiet {
		fmt.Fprintf(&env.out, format+"\n", args...)
	}
}

func (env *traceEnv) handle(t *testing.T, d *datadriven.TestData) string {
	env.t = t
	env.out.Reset()
	before := env.counters()
	switch d.Cmd {
	case "connect", "switch-mode":
		env.connect(t, d)
	case "call":
		env.call(t, d)
	case "answer":
		env.answer(t, d)
	case "drop":
		for _, a := range d.CmdArgs {
			p := env.pkt(t, a.Key)
			p.dropped = true
			env.printf("p%d lost on the way: no answer will come for it", p.n)
		}
	case "deliver":
		env.step()
	case "tick":
		if len(d.CmdArgs) != 1 {
			t.Fatalf("%s: tick <duration>", d.Pos)
		}
		dt, err := time.ParseDuration(d.CmdArgs[0].Key)
		if err != nil {
			t.Fatalf("%s: %v", d.Pos, err)
		}
		env.now += dt
		env.printf("clock %v", env.now)
		env.step()
	case "predict":
		// predict off|on: Spec-S0 clients with predictHigh false (on: the
		// hybrid format's period again); the phase learned is dropped.
		p := time.Duration(0)
		if len(d.CmdArgs) == 1 && d.CmdArgs[0].Key == "on" {
			p = spec.HighPeriod(spec.FormatHybrid)
		}
		env.s0.spec.SetPeriod(p)
		env.printf("prediction period %v", p)
	case "burn":
		env.burn(t, d)
	case "state":
		env.state()
	default:
		t.Fatalf("%s: unknown command %q", d.Pos, d.Cmd)
	}
	env.printDelta(before)
	if env.out.Len() == 0 {
		return "ok\n"
	}
	return env.out.String()
}

// connect (re-)connects the engine in mode=spec-s0 (the first time, or
// again on the same QPs: the requests in flight are requeued, their tags
// cancelled) or mode=plain, as Client.connect does: requeue, then use
// the new transport. format=hybrid makes the Spec-S0 speculator predict
// the high part's advance (the default: counter, no prediction); window
// and retransmit size its windows (one QP).
func (env *traceEnv) connect(t *testing.T, d *datadriven.TestData) {
	mode := spec.ModeSpecS0
	d.MaybeScanArgs(t, "mode", &mode)
	if d.Cmd == "switch-mode" {
		d.ScanArgs(t, "to", &mode)
	}
	if env.e.tr != nil {
		env.e.requeue()
		var names []string
		for r := env.e.backlog; r != nil; r = r.next {
			names = append(names, env.byReq[r].name)
		}
		if len(names) > 0 {
			env.printf("requeued %s: sent again on the new data path", strings.Join(names, ", "))
		}
	}
	var tr transport
	switch mode {
	case spec.ModeSpecS0:
		if env.s0 == nil || env.e.tr != transport(env.s0) {
			window, retransmit, format := 4, spec.DefaultTimeout, "counter"
			d.MaybeScanArgs(t, "window", &window)
			if d.HasArg("retransmit") {
				var s string
				d.ScanArgs(t, "retransmit", &s)
				var err error
				if retransmit, err = time.ParseDuration(s); err != nil {
					t.Fatal(err)
				}
			}
			d.MaybeScanArgs(t, "format", &format)
			f, err := spec.ParseFormat(format)
			if err != nil {
				t.Fatal(err)
			}
			env.s0 = newS0Wire(t, env, window, retransmit, spec.HighPeriod(f))
			advance := "advances with the load: nothing to predict"
			if p := env.s0.spec.Period(); p > 0 {
				advance = fmt.Sprintf("advances every %v: predicted", p)
			}
			env.printf("spec-s0: 1 QP, window %d, retransmit after %v, format %s (its high part %s)",
				window, retransmit, format, advance)
		} else {
			env.printf("spec-s0 again on the same QP: its windows and speculation stay")
		}
		tr = env.s0
	case "plain":
		env.plain = &plainWire{env: env, size: 4, seqOf: map[int]uint64{}, idOf: map[uint64]int{}}
		tr = env.plain
		env.printf("plain: requests carry sequence numbers, 4 in flight")
	default:
		t.Fatalf("%s: unknown mode %q", d.Pos, mode)
	}
	if env.e.tr != nil && env.e.tr != tr {
		env.e.tr.Close()
		env.printf("the %s transport is closed: answers still on their way to it are never polled", env.e.mode)
	}
	env.e.use(tr, mode)
}

// call submits the calls named (in order) at the current time and runs a
// step, which sends what the transport takes. deadline= gives them a
// deadline that far from now (default: the client's default timeout).
func (env *traceEnv) call(t *testing.T, d *datadriven.TestData) {
	var dl time.Duration
	if d.HasArg("deadline") {
		var s string
		d.ScanArgs(t, "deadline", &s)
		var err error
		if dl, err = time.ParseDuration(s); err != nil {
			t.Fatal(err)
		}
	}
	for _, a := range d.CmdArgs {
		if a.Key == "deadline" {
			continue
		}
		if env.calls[a.Key] != nil {
			t.Fatalf("%s: call %s exists", d.Pos, a.Key)
		}
		c := &traceCall{name: a.Key}
		c.r.Callback = env.done
		if dl > 0 {
			c.r.Deadline = env.start.Add(env.now + dl)
		}
		env.calls[c.name], env.byReq[&c.r] = c, c
		env.e.begin(&c.r, env.now)
		env.e.takeIn(&c.r, env.now)
	}
	env.step()
}

// done is every call's Callback: the engine's completions.
func (env *traceEnv) done(r *Request) {
	c := env.byReq[r]
	if r.Err != nil {
		env.printf("%s failed: %v", c.name, r.Err)
		return
	}
	env.printf("%s returns %s", c.name, fmtValue(uint64(r.TS)))
}

// step is one step of the engine at the current time: poll (the answers
// delivered), retransmit what expired, give up on calls past their
// deadline, send the backlog.
func (env *traceEnv) step() {
	env.e.step(env.now)
	env.e.setDue()
}

// answer makes the server answer packet pN with value: a Spec-S0 server
// confirms a right guess with a header-only answer and sends the full
// value otherwise. The answer reaches the client's engine at its next
// step (deliver, tick); arrived= says when it reached the host, when
// that was earlier (an answer held up in the client's socket buffer or
// CQ: the receive stamp).
func (env *traceEnv) answer(t *testing.T, d *datadriven.TestData) {
	if len(d.CmdArgs) == 0 {
		t.Fatalf("%s: answer pN value=V", d.Pos)
	}
	p := env.pkt(t, d.CmdArgs[0].Key)
	var vs string
	d.ScanArgs(t, "value", &vs)
	v := parseValue(t, vs)
	by := time.Duration(-1)
	if d.HasArg("arrived") {
		var s string
		d.ScanArgs(t, "arrived", &s)
		var err error
		if by, err = time.ParseDuration(s); err != nil {
			t.Fatal(err)
		}
	}
	if p.dropped || p.answered {
		t.Fatalf("%s: p%d was lost or answered already", d.Pos, p.n)
	}
	p.answered = true
	in := inbound{p: p, value: v, by: by}
	if p.tr != env.e.tr {
		env.printf("server answers p%d with %s, on a transport closed since: the answer is never polled", p.n, fmtValue(v))
		return
	}
	switch w := p.tr.(type) {
	case *s0Wire:
		in.imm = spec.AnswerImm(p.tag, v)
		if spec.Confirms(p.guess, v) {
			env.printf("server answers p%d (%s) with %s: the guess is right, a header-only confirmation", p.n, p.tag, fmtValue(v))
		} else {
			in.payload = make([]byte, spec.FullLen)
			spec.PutFull(in.payload, v)
			why := "no guess"
			if p.guess != spec.NoGuess {
				why = fmt.Sprintf("guess %x is wrong", uint32(p.guess))
			}
			env.printf("server answers p%d (%s) with %s: %s, the full value", p.n, p.tag, fmtValue(v), why)
		}
		w.inbox = append(w.inbox, in)
	case *plainWire:
		env.printf("server answers p%d (seq %d) with %s", p.n, p.seq, fmtValue(v))
		w.inbox = append(w.inbox, in)
	}
}

// burn runs n calls one after another, each sent and answered at once
// with the next value after the largest served, at the current time,
// printing a summary only: it walks the tag space round.
func (env *traceEnv) burn(t *testing.T, d *datadriven.TestData) {
	var n int
	d.ScanArgs(t, "n", &n)
	first := len(env.pkts) + 1
	env.quiet = true
	for i := range n {
		c := &traceCall{name: fmt.Sprintf("burn%d", i)}
		c.r.Callback = env.done
		env.calls[c.name], env.byReq[&c.r] = c, c
		env.e.begin(&c.r, env.now)
		env.e.takeIn(&c.r, env.now)
		env.step()
		if c.sends == 0 {
			env.quiet = false
			env.printf("burn: call %d of %d was not sent", i+1, n)
			return
		}
		p := env.pkts[len(env.pkts)-1]
		p.answered = true
		v := env.maxRet.Load() + 1
		env.s0.inbox = append(env.s0.inbox, inbound{p: p, imm: spec.AnswerImm(p.tag, v), payload: full(v), value: v, by: -1})
		env.step()
		if c.r.Err != nil || c.r.TS == 0 {
			env.quiet = false
			env.printf("burn: call %d of %d did not complete: %v", i+1, n, c.r.Err)
			return
		}
	}
	env.quiet = false
	last := env.pkts[len(env.pkts)-1]
	env.printf("burned %d calls, p%d..p%d, %s..%s, each answered: the last returned %s",
		n, first, last.n, env.pkts[first-1].tag, last.tag, fmtValue(env.maxRet.Load()))
}

func full(v uint64) []byte {
	b := make([]byte, spec.FullLen)
	spec.PutFull(b, v)
	return b
}

// state prints the engine's state: calls in flight and queued, the
// window, what a request sent now would guess, whether the shell would
// reconnect.
func (env *traceEnv) state() {
	e := &env.e
	env.printf("clock %v, mode %s", env.now, e.mode)
	var inflight []string
	for id, r := range e.reqs {
		if r == nil {
			continue
		}
		s := fmt.Sprintf("%s (id %d", env.byReq[r].name, id)
		if e.tr == transport(env.s0) {
			if qi := env.s0.idQP[id]; qi >= 0 {
				s += fmt.Sprintf(", %s", env.s0.idTag[id])
			} else {
				s += ", expired, waiting for a tag"
			}
		}
		inflight = append(inflight, s+")")
	}
	slices.Sort(inflight)
	env.printf("in flight: %s", list(inflight))
	var queued []string
	for r := e.backlog; r != nil; r = r.next {
		queued = append(queued, env.byReq[r].name)
	}
	env.printf("queued: %s", list(queued))
	if e.tr == transport(env.s0) {
		s := env.s0
		env.printf("window: %d of %d outstanding", s.qps[0].win.Outstanding(), s.qps[0].granted)
		if g, high := s.spec.Guess(env.now); g == spec.NoGuess {
			env.printf("a request sent now guesses nothing (asks for the full value)")
		} else {
			env.printf("a request sent now guesses high part %x", high)
		}
	}
	if d, ok := e.tr.NextDeadline(); ok {
		env.printf("next retransmission at %v", d)
	}
	switch due, force := e.reconnectDue(env.now, false); {
	case due && force:
		env.printf("the shell would reconnect now")
	case due:
		env.printf("no answer for %v: the shell would probe the server's epoch now", env.now-e.lastAns)
	}
}

func list(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

// pkt returns packet "pN".
func (env *traceEnv) pkt(t *testing.T, name string) *tracePkt {
	n, err := strconv.Atoi(strings.TrimPrefix(name, "p"))
	if err != nil || !strings.HasPrefix(name, "p") || n < 1 || n > len(env.pkts) {
		t.Fatalf("no packet %q", name)
	}
	return env.pkts[n-1]
}

// sent records and prints a request put on the wire.
func (env *traceEnv) sent(p *tracePkt) {
	p.n, p.sentAt = len(env.pkts)+1, env.now
	env.pkts = append(env.pkts, p)
	p.call.sends++
	again := ""
	if p.call.sends > 1 {
		again = ", sent again"
	}
	switch p.tr.(type) {
	case *s0Wire:
		g := "no guess"
		if p.guess != spec.NoGuess {
			g = fmt.Sprintf("guess %x", uint32(p.guess))
		}
		env.printf("p%d: %s sent under %s, %s%s", p.n, p.call.name, p.tag, g, again)
	default:
		env.printf("p%d: %s sent as seq %d%s", p.n, p.call.name, p.seq, again)
	}
}

type counterSet [8]uint64

var counterNames = [...]string{"answers", "retransmits", "stale", "late", "spec misses", "timeouts", "regressions", "malformed"}

func (env *traceEnv) counters() counterSet {
	s := &env.st
	return counterSet{s.answers.Load(), s.retransmits.Load(), s.stale.Load(), s.late.Load(),
		s.specMisses.Load(), s.timeouts.Load(), s.regressions.Load(), s.malformed.Load()}
}

// printDelta prints the counters an input moved.
func (env *traceEnv) printDelta(before counterSet) {
	after := env.counters()
	var parts []string
	for i := range after {
		if after[i] != before[i] {
			parts = append(parts, fmt.Sprintf("%s +%d", counterNames[i], after[i]-before[i]))
		}
	}
	if len(parts) > 0 {
		env.printf("counters: %s", strings.Join(parts, ", "))
	}
}

// fmtValue prints a value as its high part and its low LowBits bits, in
// hex: 5:00010 is 5<<20 | 0x10.
func fmtValue(v uint64) string { return fmt.Sprintf("%x:%05x", v>>spec.LowBits, v&spec.LowMask) }

func parseValue(t *testing.T, s string) uint64 {
	hs, ls, ok := strings.Cut(s, ":")
	h, err1 := strconv.ParseUint(hs, 16, 64)
	l, err2 := strconv.ParseUint(ls, 16, 32)
	if !ok || err1 != nil || err2 != nil || l > spec.LowMask {
		t.Fatalf("value %q: want high:low in hex", s)
	}
	return h<<spec.LowBits | l
}

// s0Wire is the real Spec-S0 transport (specS0) with its verbs calls cut
// off: Flush records what the step queued instead of posting it, and
// Poll hands the answers of the script to specS0.answer, which matches
// them to their requests by tag and decodes them, as it does the
// receives of a CQ.
type s0Wire struct {
	*specS0
	env   *traceEnv
	inbox []inbound
}

func newS0Wire(t *testing.T, env *traceEnv, window int, retransmit, period time.Duration) *s0Wire {
	s := &specS0{env: &transportEnv{st: &env.st, log: slog.New(slog.DiscardHandler), now: func() time.Duration { return env.now }},
		ahs: []verbs.AH{nil}, srvQPN: []verbs.QPN{1}, epoch: 1}
	s.sizeIDs(window)
	win, err := spec.NewWindow(spec.WindowConfig{Size: window, Timeout: retransmit})
	if err != nil {
		t.Fatal(err)
	}
	s.qps = []*s0QP{{win: win, granted: window, wrs: make([]verbs.SendWR, window)}}
	s.spec.SetPeriod(period)
	return &s0Wire{specS0: s, env: env}
}

// Flush records the requests the step queued as sent (and their send
// completions as done).
func (w *s0Wire) Flush() {
	for qi, q := range w.qps {
		for _, wr := range q.wrs[:q.nwr] {
			tag, g := spec.DecodeRequest(spec.Imm(wr.Imm))
			w.env.sent(&tracePkt{call: w.callOn(qi, tag), tr: w, qp: qi, tag: tag, guess: g})
		}
		q.posted += uint64(q.nwr)
		q.done, q.nwr = q.posted, 0
	}
}

// callOn is the call in flight under QP qi's tag.
func (w *s0Wire) callOn(qi int, tag spec.Tag) *traceCall {
	for id, q := range w.idQP {
		if q == qi && w.idTag[id] == tag {
			return w.env.byReq[w.env.e.reqs[id]]
		}
	}
	w.env.t.Fatalf("no request in flight under QP %d %s", qi, tag)
	return nil
}

// Poll hands the answers delivered to specS0.answer.
func (w *s0Wire) Poll(now time.Duration, res []result) int {
	w.now = now
	k := 0
	for _, in := range w.inbox {
		by := in.by
		if by < 0 {
			by = now
		}
		p := in.p
		before := w.env.st.late.Load()
		if !w.answer(now, by, w.qps[p.qp], in.imm, in.payload, &res[k]) {
			if w.env.st.late.Load() != before {
				w.env.printf("answer to p%d (%s) is late: it reached the host at %v, before %s was sent again: dropped",
					p.n, p.tag, by, p.tag)
			} else {
				w.env.printf("answer to p%d (%s) is stale: %s is not outstanding: dropped", p.n, p.tag, p.tag)
			}
			continue
		}
		w.env.matched(p, res[k])
		k++
	}
	w.inbox = w.inbox[:0]
	return k
}

// matched prints the request an answer to p was matched to, and fails
// the test when that is not p's call: an answer must never complete
// another call.
func (env *traceEnv) matched(p *tracePkt, x result) {
	c := env.byReq[env.e.reqs[x.ID]]
	if c == nil {
		env.t.Errorf("the answer to p%d (%s) was matched to request ID %d, which is not in flight", p.n, p.call.name, x.ID)
		env.printf("answer to p%d matched request ID %d, not in flight", p.n, x.ID)
		return
	}
	if c != p.call {
		env.t.Errorf("the answer to p%d (%s) was matched to %s", p.n, p.call.name, c.name)
	}
	if x.Err != nil {
		env.printf("answer to p%d matched %s: %v", p.n, c.name, x.Err)
		return
	}
	env.printf("answer to p%d matched %s: %s", p.n, c.name, fmtValue(x.Value))
}

// plainWire is a fake transport of another mode: each request goes out
// under a fresh sequence number, and an answer is matched by it; there
// is no retransmission (the transport's own, RC's, is below it).
type plainWire struct {
	env   *traceEnv
	size  int
	next  uint64
	seqOf map[int]uint64
	idOf  map[uint64]int
	inbox []inbound
}

var _ transport = (*plainWire)(nil)

func (w *plainWire) Free() int        { return w.size - len(w.seqOf) }
func (w *plainWire) Outstanding() int { return len(w.seqOf) }

func (w *plainWire) Send(now time.Duration, ids []int) (int, error) {
	r := w.env.e.backlog // ids are for the backlog's head, in order
	for _, id := range ids {
		w.next++
		w.seqOf[id], w.idOf[w.next] = w.next, id
		w.env.sent(&tracePkt{call: w.env.byReq[r], tr: w, seq: w.next})
		r = r.next
	}
	return len(ids), nil
}

func (w *plainWire) Poll(now time.Duration, res []result) int {
	k := 0
	for _, in := range w.inbox {
		id, ok := w.idOf[in.p.seq]
		if !ok {
			w.env.printf("answer to p%d (seq %d) is stale: seq %d is not in flight: dropped", in.p.n, in.p.seq, in.p.seq)
			w.env.st.stale.Add(1)
			continue
		}
		delete(w.idOf, in.p.seq)
		delete(w.seqOf, id)
		res[k] = result{ID: id, Value: in.value}
		w.env.matched(in.p, res[k])
		k++
	}
	w.inbox = w.inbox[:0]
	return k
}

func (w *plainWire) Expire(time.Duration) int            { return 0 }
func (w *plainWire) NextDeadline() (time.Duration, bool) { return 0, false }
func (w *plainWire) CQ() verbs.CQ                        { return nil }
func (w *plainWire) Broken() bool                        { return false }
func (w *plainWire) Close() error                        { return nil }
func (w *plainWire) Cancel(id int) {
	if seq, ok := w.seqOf[id]; ok {
		delete(w.seqOf, id)
		delete(w.idOf, seq)
	}
}

// Close has no QPs to close.
func (w *s0Wire) Close() error { return nil }
