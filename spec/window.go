package spec

import (
	"errors"
	"fmt"
	"time"
)

// Errors of Window.Send.
var (
	ErrWindowFull = errors.New("spec: window full")
	ErrNoTag      = errors.New("spec: next tag still in quarantine")
)

// WindowConfig sizes a Window.
type WindowConfig struct {
	// Size is the most requests outstanding at once, 1..MaxWindow.
	Size int
	// Timeout: a request unanswered this long is expired by Expire.
	// Default DefaultTimeout. A request whose answers came back slower
	// waits longer (SendBackoff).
	Timeout time.Duration
	// MaxTimeout caps the timeout of a backed-off request. Default
	// MaxBackoff times Timeout.
	MaxTimeout time.Duration
	// Quarantine: a released tag is not handed out again for this long.
	// Default DefaultQuarantine. It must not be shorter than
	// MaxAnswerDelay: a tag released by the first answer to its request
	// (a duplicate, or the answer of a retransmitted copy, can follow it)
	// may see answers up to MaxAnswerDelay after the send, and the send
	// can be as little as zero before the release. Only a tag released by
	// timeout has Timeout of that delay already behind it; Validate holds
	// every tag to the bound of the worst one.
	Quarantine time.Duration
}

// MaxBackoff is the default MaxTimeout as a multiple of Timeout: a
// request backed off six times or more waits 64 Timeouts.
const MaxBackoff = 64

// MaxWindow is the largest window: half the tag space, so that a tag
// always has time to sit out its quarantine.
const MaxWindow = NumTags / 2

// Validate fills defaults and checks c.
func (c WindowConfig) Validate() (WindowConfig, error) {
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.Quarantine == 0 {
		c.Quarantine = DefaultQuarantine
	}
	if c.MaxTimeout == 0 {
		c.MaxTimeout = MaxBackoff * c.Timeout
	}
	switch {
	case c.Size < 1 || c.Size > MaxWindow:
		return c, fmt.Errorf("spec: window size %d outside 1..%d", c.Size, MaxWindow)
	case c.Timeout < 0:
		return c, fmt.Errorf("spec: negative timeout %v", c.Timeout)
	case c.MaxTimeout < c.Timeout:
		return c, fmt.Errorf("spec: max timeout %v shorter than the timeout %v", c.MaxTimeout, c.Timeout)
	case c.Quarantine < MaxAnswerDelay:
		return c, fmt.Errorf("spec: quarantine %v shorter than the max answer delay %v (a tag released by its first answer needs all of it)", c.Quarantine, MaxAnswerDelay)
	}
	return c, nil
}

type tagState struct {
	out      bool
	used     bool
	gen      uint32
	expired  bool // released by Expire (and not handed out since)
	backoff  int
	sent     time.Duration
	timeout  time.Duration // TimeoutOf(backoff)
	released time.Duration
	cookie   uint64
}

type fifoEntry struct {
	tag Tag
	gen uint32
}

// Expired is a request Expire gave up on.
type Expired struct {
	Tag    Tag
	Cookie uint64
	Sent   time.Duration
	// Backoff is the backoff it was sent with (SendBackoff).
	Backoff int
}

// Window matches answers to the outstanding requests of one client queue
// pair. It hands out tags, remembers when each was sent, accepts an answer
// only for a tag that is outstanding, expires requests that waited too
// long and keeps every released tag in quarantine before reuse.
//
// A request whose answers come back slower than its timeout waits
// longer (SendBackoff, ExpiredAnswer), as TCP's retransmission timer
// backs off (RFC 6298, 5.5), but for slowness seen, not for every loss:
// with one fixed timeout, such a request would be sent again, under a
// fresh tag, just before each answer came, and every answer would be
// stale, forever.
//
// It is pure: no I/O, no goroutines, no clock. Time is a monotonic
// duration from any origin, passed in by the caller, and must not go
// backwards. A Window is not safe for concurrent use.
type Window struct {
	cfg   WindowConfig
	tags  [NumTags]tagState
	next  Tag
	out   int
	fifo  [NumTags]fifoEntry // outstanding tags in send order (and stale leftovers)
	head  int
	count int
	// backedOff counts the outstanding tags whose timeout is longer than
	// cfg.Timeout. While it is zero the FIFO is in deadline order too.
	backedOff int
}

// NewWindow returns an empty Window.
func NewWindow(cfg WindowConfig) (*Window, error) {
	cfg, err := cfg.Validate()
	if err != nil {
		return nil, err
	}
	return &Window{cfg: cfg}, nil
}

// Config returns the validated configuration.
func (w *Window) Config() WindowConfig { return w.cfg }

// Outstanding is the number of requests awaiting an answer.
func (w *Window) Outstanding() int { return w.out }

// Send allocates a fresh tag for a request sent at now and remembers
// cookie for it. Tags are handed out in cyclic order, skipping outstanding
// ones; if the next tag is still in quarantine Send fails with ErrNoTag
// and retry is when it leaves it.
func (w *Window) Send(now time.Duration, cookie uint64) (t Tag, retry time.Duration, err error) {
	return w.SendBackoff(now, cookie, 0)
}

// TimeoutOf is how long a request sent with backoff b waits for its
// answer: Timeout doubled b times, at most MaxTimeout.
func (c WindowConfig) TimeoutOf(b int) time.Duration {
	d := c.Timeout
	for range min(b, 62) {
		if d >= c.MaxTimeout {
			break
		}
		d *= 2
	}
	return min(d, c.MaxTimeout)
}

// SendBackoff is Send for a request that waits TimeoutOf(backoff) for
// its answer. The caller raises a request's backoff by one for each
// answer to an expired copy of it (ExpiredAnswer): evidence that its
// answers take longer than it waited. A loss, which leaves no answer,
// raises nothing.
func (w *Window) SendBackoff(now time.Duration, cookie uint64, backoff int) (t Tag, retry time.Duration, err error) {
	if w.out >= w.cfg.Size {
		return 0, 0, ErrWindowFull
	}
	for range NumTags {
		t = w.next
		w.next = (w.next + 1) & (NumTags - 1)
		s := &w.tags[t]
		if s.out {
			continue
		}
		if s.used && now-s.released < w.cfg.Quarantine {
			w.next = t // try the same tag again next time
			return 0, s.released + w.cfg.Quarantine, ErrNoTag
		}
		s.out, s.used = true, true
		s.gen++
		s.sent, s.cookie, s.backoff, s.expired = now, cookie, max(backoff, 0), false
		s.timeout = w.cfg.TimeoutOf(s.backoff)
		if s.timeout != w.cfg.Timeout {
			w.backedOff++
		}
		w.out++
		w.push(fifoEntry{t, s.gen})
		return t, 0, nil
	}
	return 0, 0, ErrWindowFull // unreachable: out < Size <= NumTags/2
}

func (w *Window) push(e fifoEntry) {
	if w.count == len(w.fifo) {
		w.compact()
	}
	w.fifo[(w.head+w.count)%len(w.fifo)] = e
	w.count++
}

// compact drops entries of tags no longer outstanding under that
// generation. At most Size entries stay, so the FIFO never overflows.
func (w *Window) compact() {
	n := 0
	for i := range w.count {
		e := w.fifo[(w.head+i)%len(w.fifo)]
		if w.live(e) {
			w.fifo[(w.head+n)%len(w.fifo)] = e
			n++
		}
	}
	w.count = n
}

func (w *Window) live(e fifoEntry) bool {
	s := &w.tags[e.tag]
	return s.out && s.gen == e.gen
}

// Answer accepts an answer for t arriving at now. It returns the request's
// cookie and send time if t is outstanding; otherwise the answer is stale
// or a duplicate (or forged) and ok is false. An accepted tag enters
// quarantine.
func (w *Window) Answer(now time.Duration, t Tag) (cookie uint64, sent time.Duration, ok bool) {
	cookie, sent, ok, _ = w.AnswerArrived(now, now, t)
	return cookie, sent, ok
}

// AnswerArrived is Answer for an answer known to have arrived at the
// client no later than by (a bound from above on its arrival, on the
// Window's clock; now when nothing better is known). An answer that
// arrived before the request now outstanding under its tag was sent
// cannot be that request's: it answers an earlier use of the tag,
// delayed past the quarantine. It is rejected as stale (late is true)
// and the tag stays outstanding, so that the quarantine is no longer the
// only guard against an answer held up on its way to the client's
// software: in its socket buffer, its CQ, or a stalled poller. (The
// caller must take sent no later than the request really left: the
// answer to it cannot arrive before that.)
func (w *Window) AnswerArrived(now, by time.Duration, t Tag) (cookie uint64, sent time.Duration, ok, late bool) {
	if !t.Valid() {
		return 0, 0, false, false
	}
	s := &w.tags[t]
	if !s.out {
		return 0, 0, false, false
	}
	if by < s.sent {
		return 0, 0, false, true
	}
	w.release(s, now)
	w.trim()
	return s.cookie, s.sent, true, false
}

// ExpiredAnswer reports, for an answer AnswerArrived rejected (not
// late), whether it answers a copy of a request that Expire gave up on
// (its tag not handed out since): the answer came back slower than that
// copy's timeout. It returns the copy's cookie and backoff; the caller
// sends that request, if still unanswered, with a higher backoff from
// then on. It reports each expired copy once.
func (w *Window) ExpiredAnswer(t Tag) (cookie uint64, backoff int, ok bool) {
	if !t.Valid() {
		return 0, 0, false
	}
	s := &w.tags[t]
	if s.out || !s.expired {
		return 0, 0, false
	}
	s.expired = false // once per copy: a duplicate of the answer is no more evidence
	return s.cookie, s.backoff, true
}

// Cancel releases an outstanding tag whose caller gave up; late answers to
// it are rejected as stale. It reports whether t was outstanding.
func (w *Window) Cancel(now time.Duration, t Tag) bool {
	if !t.Valid() || !w.tags[t].out {
		return false
	}
	w.release(&w.tags[t], now)
	w.trim()
	return true
}

func (w *Window) release(s *tagState, now time.Duration) {
	s.out = false
	s.released = now
	w.out--
	if s.timeout != w.cfg.Timeout {
		w.backedOff--
	}
}

func (w *Window) trim() {
	for w.count > 0 && !w.live(w.fifo[w.head]) {
		w.head = (w.head + 1) % len(w.fifo)
		w.count--
	}
}

// Expire releases every request whose timeout has passed, in send
// order, appending them to dst. The caller retransmits them under fresh
// tags.
func (w *Window) Expire(now time.Duration, dst []Expired) []Expired {
	if w.backedOff > 0 {
		// Deadlines are not in send order: look at every entry, and
		// keep only the live ones that stay (at most Size, so that the
		// next look is short too).
		n := 0
		for i := range w.count {
			e := w.fifo[(w.head+i)%len(w.fifo)]
			if !w.live(e) {
				continue
			}
			if s := &w.tags[e.tag]; now-s.sent >= s.timeout {
				dst = append(dst, Expired{Tag: e.tag, Cookie: s.cookie, Sent: s.sent, Backoff: s.backoff})
				w.release(s, now)
				s.expired = true
				continue
			}
			w.fifo[(w.head+n)%len(w.fifo)] = e
			n++
		}
		w.count = n
		return dst
	}
	for w.count > 0 {
		e := w.fifo[w.head]
		s := &w.tags[e.tag]
		if w.live(e) {
			if now-s.sent < w.cfg.Timeout {
				break
			}
			dst = append(dst, Expired{Tag: e.tag, Cookie: s.cookie, Sent: s.sent, Backoff: s.backoff})
			w.release(s, now)
			s.expired = true
		}
		w.head = (w.head + 1) % len(w.fifo)
		w.count--
	}
	return dst
}

// NextDeadline is when the next outstanding request expires; ok is false
// when none is outstanding.
func (w *Window) NextDeadline() (d time.Duration, ok bool) {
	w.trim()
	if w.count == 0 {
		return 0, false
	}
	if w.backedOff == 0 {
		s := &w.tags[w.fifo[w.head].tag]
		return s.sent + s.timeout, true
	}
	for i := range w.count {
		e := w.fifo[(w.head+i)%len(w.fifo)]
		if s := &w.tags[e.tag]; w.live(e) && (!ok || s.sent+s.timeout < d) {
			d, ok = s.sent+s.timeout, true
		}
	}
	return d, ok
}
