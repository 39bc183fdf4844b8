// Package worker is the skeleton every CPU mode's worker shares (spec-s0,
// herd and the modes after them): the configuration common to their
// worker pools, core pinning, the claim of a batch's values from the
// oracle within the residence bound, and the response QPs a batch's
// answers leave on (package respq). The modes that take requests over UD
// (spec-s0, fasst) find a request's client QP in one peer table (Peers),
// keyed by one identity (Config.PeerID).
//
// A mode embeds Config in its own configuration and Base in its worker:
//
//	w.Init(&cfg.Config, id, pd, sendCQ, slotLen, &s.stopped, worker.Counters{...})
//	defer w.Pin()()
//	...
//	first, ok := w.Claim(oldest, n)
//	b, ok := w.Next(n) // fill b.Prepare / b.Slot
//	w.Post(b, wrs, oldest)
//	w.ReapSends()
//
// Nothing here allocates on the hot path (Claim, Next, Post, ReapSends).
package worker

import (
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seqd/seqd/admin/handshake"
	"github.com/seqd/seqd/dataplane"
	"github.com/seqd/seqd/internal/claim"
	"github.com/seqd/seqd/internal/hist"
	"github.com/seqd/seqd/internal/respq"
	"github.com/seqd/seqd/spec"
	"github.com/seqd/seqd/verbs"
)

// Defaults of the common fields, filled in by Config.Fill.
const (
	DefaultWorkers     = 1
	DefaultRespQPs     = 3
	DefaultBatch       = 256
	DefaultSignalEvery = 32
	DefaultSendDepth   = 1024
)

// Config is the configuration every CPU mode's worker pool shares.
type Config struct {
	// Device the mode's QPs live on. Required.
	Device verbs.Device
	// Oracle hands out values. Required.
	Oracle dataplane.Claimer
	// Behind is the error Oracle.Claim returns when persistence lags
	// (oracle.ErrBehind): the batch is kept and the claim retried.
	Behind error
	// Workers is the number of polling workers. Default 1.
	Workers int
	// RespQPs is the number of response UD QPs per worker. Default 3.
	RespQPs int
	// Cores pins worker i to Cores[i]; -1 or a missing entry leaves it
	// unpinned.
	Cores []int
	// Batch is the most requests one batch answers. Default 256: one
	// full window of a client QP, so that under load one poll, one claim
	// and one doorbell (one sendmmsg on the soft provider) serve all a
	// busy client has in flight (at 64, the per-batch system calls cost
	// the 1-flow server 10-15% of its throughput; docs/performance.md).
	// Under light load batches stay as small as the polls find them.
	Batch int
	// SignalEvery: one send work request in SignalEvery is signaled.
	// Default 32.
	SignalEvery int
	// SendDepth is the send queue depth of each response QP. Default 1024.
	SendDepth int
	// QKey of the data-path packets. Default verbs.DefaultQKey.
	QKey uint32
	// Epoch identifies this run of the mode. Default: the start time in ns.
	Epoch uint64
	// MaxSessionRecv is the most receives (QPs × window) one session may
	// hold; a session asking for more gets a smaller window (SessionCap,
	// SessionWindow). Default: a quarter of a worker's receive budget;
	// negative: no cap.
	MaxSessionRecv int
	// Logger. Default slog.Default().
	Logger *slog.Logger
}

// Fill fills in the defaults of c and checks it; errors wrap errConfig
// (the mode's own ErrConfig).
func (c *Config) Fill(errConfig error) error {
	if c.Device == nil || c.Oracle == nil {
		return fmt.Errorf("%w: Device and Oracle are required", errConfig)
	}
	if err := Defaults(errConfig, Field{"Workers", &c.Workers, DefaultWorkers}, Field{"RespQPs", &c.RespQPs, DefaultRespQPs},
		Field{"Batch", &c.Batch, DefaultBatch}, Field{"SignalEvery", &c.SignalEvery, DefaultSignalEvery},
		Field{"SendDepth", &c.SendDepth, DefaultSendDepth}); err != nil {
		return err
	}
	if c.SendDepth < 2*c.Batch || c.SignalEvery > c.SendDepth/2 {
		return fmt.Errorf("%w: SendDepth %d must be at least 2*Batch (%d) and 2*SignalEvery (%d)", errConfig, c.SendDepth, c.Batch, c.SignalEvery)
	}
	if len(c.Cores) > c.Workers {
		return fmt.Errorf("%w: %d cores for %d workers", errConfig, len(c.Cores), c.Workers)
	}
	if c.QKey == 0 {
		c.QKey = verbs.DefaultQKey
	}
	if c.Epoch == 0 {
		c.Epoch = uint64(time.Now().UnixNano())
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// Default sets *p to d when it is 0; a negative *p is an error wrapping
// errConfig.
func Default(errConfig error, name string, p *int, d int) error {
	if *p == 0 {
		*p = d
	}
	if *p < 0 {
		return fmt.Errorf("%w: %s %d is negative", errConfig, name, *p)
	}
	return nil
}

// Field is one integer setting of a mode's config: its name, where it
// is, and its default.
type Field struct {
	Name    string
	P       *int
	Default int
}

// Defaults applies Default to each field, in order.
func Defaults(errConfig error, fs ...Field) error {
	for _, f := range fs {
		if err := Default(errConfig, f.Name, f.P, f.Default); err != nil {
			return err
		}
	}
	return nil
}

// FillSlots fills in and checks the limits of a mode whose clients WRITE
// requests into slots (herd, rfp): *maxWindow slots per client QP
// (default defWindow, at most protoMax) and *maxQPs client QPs per worker
// (default defQPs). Errors wrap errConfig.
func FillSlots(errConfig error, maxWindow *int, defWindow, protoMax int, maxQPs *int, defQPs int) error {
	if err := Default(errConfig, "MaxWindow", maxWindow, defWindow); err != nil {
		return err
	}
	if err := Default(errConfig, "MaxQPs", maxQPs, defQPs); err != nil {
		return err
	}
	if *maxWindow > protoMax {
		return fmt.Errorf("%w: MaxWindow %d above the protocol's %d", errConfig, *maxWindow, protoMax)
	}
	return nil
}

// Core is the core worker i is pinned to, -1 for none.
func (c *Config) Core(i int) int {
	if i < len(c.Cores) {
		return c.Cores[i]
	}
	return -1
}

// The drop reasons every CPU worker counts (Base counts them); a mode
// numbers its own from NumDrops on and names them at Init.
const (
	// DropExpired: older than spec.MaxResidence before its values were
	// claimed.
	DropExpired = iota
	// DropLate: its claimed values were skipped because the doorbell would
	// have come later than spec.MaxResidence after it arrived.
	DropLate
	// DropOracle: the oracle refused the claim.
	DropOracle
	// DropSend: its answer could not be posted, or completed in error.
	DropSend
	NumDrops
)

var dropNames = [NumDrops]string{"expired", "late", "oracle_error", "send_error"}

// Counts are a worker's counters: written by the worker only, read at any
// time.
type Counts struct {
	Batches  atomic.Uint64 // batches answered
	Requests atomic.Uint64 // requests whose answers were posted
	// Unsent counts the values of answers posted (in Requests) that
	// never left: the provider failed them or dropped them past their
	// deadline (each answer counted too in Drops, DropSend or DropLate).
	// An answer carries one value unless the mode weighs it
	// (respq.Batch.Weigh). Answered = Requests − Unsent.
	Unsent atomic.Uint64
	Stalls atomic.Uint64 // claims refused with Config.Behind
	// Drops counts requests not answered, by reason: DropExpired to
	// DropSend, then the mode's own.
	Drops     []atomic.Uint64
	dropNames []string
}

// Base is the part every CPU worker shares: its identity, its response
// QPs, its claims. Embed it in the worker and call Init before use; it
// is owned by the worker goroutine (Stall excepted).
type Base struct {
	ID int
	// Core the worker runs on: -1 unpinned (or pinning failed).
	Core int
	Log  *slog.Logger
	// Resp are the worker's response QPs.
	Resp *respq.Set
	// Stall, when set (tests only), runs between a batch's claim and its
	// answers' doorbell (in Next): a worker descheduled there, or a send
	// queue that drains slowly. Loaded once per batch.
	Stall atomic.Pointer[func()]
	// Late, when set (tests only), runs after a batch's final residence
	// check (Fresh), before its answers are handed to the provider (Post,
	// PostWith): a worker descheduled right there, or a provider whose
	// flush waits for socket room. Loaded once per batch with answers.
	Late atomic.Pointer[func()]

	Counts

	tid atomic.Int32 // the worker's thread while pinned (ThreadCPU), else 0

	cfg         *Config
	shared      bool          // InitShared
	queues      atomic.Uint64 // QPs placed by NextQueue
	stopped     *atomic.Bool
	sampled     uint64          // batches posted, for sampling
	serviceTime *hist.Histogram // nanoseconds
	// at claims with the worker's own clock reading when the oracle takes
	// one (claim.AtClaimer): the wall clock, as wall, one reading of both
	// clocks (syncMono, syncWall, Unix nanoseconds) at most a millisecond
	// old carried forward on the monotonic clock the worker polls by.
	at       claim.At
	atOK     bool
	syncMono verbs.Time
	syncWall int64
}

// SampleEvery is how often a worker samples a batch's service time.
const SampleEvery = 16

// ServiceTimeBounds are the service-time histogram's bucket bounds:
// 1 µs to ~16 ms, doubling.
var ServiceTimeBounds = hist.Exponential(1000, 2, 15)

// Init sets b up as worker id of cfg, with response QPs on pd whose sends
// complete on sendCQ, each with slotLen payload bytes per entry. A mode
// that answers on its clients' own connections passes NoResp for slotLen
// (rfp) or a nil sendCQ (darpc): it gets no response QPs (Resp stays nil;
// Next, Post and ReapSends are not for it). stopped tells the claim to
// give up when the mode stops. drops names the mode's own drop reasons,
// NumDrops on.
func (b *Base) Init(cfg *Config, id int, pd verbs.PD, sendCQ verbs.CQ, slotLen int, stopped *atomic.Bool, drops ...string) error {
	b.ID, b.Core, b.Log, b.cfg, b.stopped = id, cfg.Core(id), cfg.Logger.With("worker", id), cfg, stopped
	b.serviceTime = hist.New(ServiceTimeBounds)
	b.initClaim()
	b.initCounts(drops)
	if slotLen == NoResp || sendCQ == nil {
		return nil
	}
	var err error
	if b.Resp, err = respq.New(respq.Config{PD: pd, CQ: sendCQ, QPs: cfg.RespQPs, Depth: cfg.SendDepth,
		SignalEvery: cfg.SignalEvery, SlotLen: slotLen, QKey: cfg.QKey, Batch: cfg.Batch,
		Shared: b.shared, Device: cfg.Device, Queue: b.NextQueue}); err != nil {
		return fmt.Errorf("worker %d: %w", id, err)
	}
	return nil
}

// InitShared is Init for a worker whose one CQ takes both its requests'
// completions and its answers' (cq): the worker polls it once per batch,
// hands send completions to Resp.Complete (SendDone), drains
// Resp.TakeSpilled before polling, and posts a batch's receives with its
// answers (PostWith): two provider crossings per batch.
func (b *Base) InitShared(cfg *Config, id int, pd verbs.PD, cq verbs.CQ, slotLen int, stopped *atomic.Bool, drops ...string) error {
	b.shared = true
	return b.Init(cfg, id, pd, cq, slotLen, stopped, drops...)
}

// SendDone takes a completion polled from the shared CQ (InitShared): it
// reports whether it was an answer's, counting a failed one. A successful
// receive (a request's) is never one, and is told apart without asking
// the response QPs (a failed completion's opcode is undefined: its ID
// tells).
func (b *Base) SendDone(wc *verbs.WC) bool {
	if wc.Status == verbs.WCSuccess && wc.Opcode == verbs.WCRecv {
		return false
	}
	return b.sendDone(wc)
}

func (b *Base) sendDone(wc *verbs.WC) bool {
	mine, failed, unsent := b.Resp.Complete(wc)
	switch {
	case !failed:
	case wc.Status == verbs.WCDeadlineErr: // the provider held it past the batch's deadline
		b.Drops[DropLate].Add(1)
		b.Unsent.Add(uint64(unsent))
	default:
		b.Drops[DropSend].Add(1)
		b.Unsent.Add(uint64(unsent))
	}
	return mine
}

// NextQueue is the verbs.QPInitAttr.Queue of the worker's next QP
// (WorkerQueue). Safe for concurrent use.
func (b *Base) NextQueue() int {
	return b.cfg.WorkerQueue(b.ID, int(b.queues.Add(1)-1))
}

// WorkerQueue is the verbs.QPInitAttr.Queue of worker id's k-th QP: a
// worker's QPs go round-robin over its share of the device's engines
// (engine i belongs to worker i mod Workers), so that no two workers
// drive or send through one engine. 0 (the provider's choice) on a
// device without engines, or with fewer than workers.
func (c *Config) WorkerQueue(id, k int) int {
	q, w := c.Device.Attr().Queues, c.Workers
	if q < w || w < 1 || id >= q || id < 0 {
		return 0
	}
	mine := (q - id + w - 1) / w // engines id, id+w, ... below q
	return 1 + id + (k%mine)*w
}

// NoResp, as Init's slotLen, makes a worker without response QPs.
const NoResp = -1

// Close releases the response QPs.
func (b *Base) Close() {
	if b.Resp != nil {
		b.Resp.Close()
		b.Resp = nil
	}
}

// Pin locks the calling goroutine to its thread and binds that to the
// worker's core, if it has one; the function it returns undoes the lock.
// When pinning fails the worker runs unpinned (Core -1).
func (b *Base) Pin() (unlock func()) {
	if b.Core < 0 {
		return func() {}
	}
	runtime.LockOSThread()
	if err := Pin(b.Core); err != nil {
		b.Log.Warn("running unpinned", "err", err)
		b.Core = -1
	} else {
		b.Log.Debug("pinned", "core", b.Core)
	}
	b.tid.Store(int32(gettid()))
	return func() {
		b.tid.Store(0)
		runtime.UnlockOSThread()
	}
}

// Tid is the ID of the thread the worker runs on while it is pinned (its
// goroutine is then locked to it), for ThreadCPU; 0 when it is not.
func (b *Base) Tid() int { return int(b.tid.Load()) }

// Expired reports whether a batch whose oldest request arrived at oldest
// is older than spec.MaxResidence.
func Expired(oldest verbs.Time) bool { return verbs.Now().Sub(oldest) > spec.MaxResidence }

// Claim claims n values for a batch whose oldest request arrived at
// oldest, through claim.Batch: retrying while the oracle is behind,
// giving up (and counting the n requests) once the batch is older than
// spec.MaxResidence, the mode stopped, or the oracle failed.
func (b *Base) Claim(oldest verbs.Time, n int) (uint64, bool) {
	return b.ClaimPolled(verbs.Now(), oldest, n)
}

// ClaimPolled is Claim for a worker that read the clock when it polled
// the batch (polled): the first age check takes that reading instead of
// its own (one clock read fewer per batch, which a serial caller's round
// trip pays in full). An earlier reading only understates the batch's
// age, so a batch that aged past the bound since is caught where it
// matters, by the check before the doorbell (PostWith), at the cost of
// the values claimed for it.
func (b *Base) ClaimPolled(polled, oldest verbs.Time, n int) (uint64, bool) {
	if polled.Sub(oldest) > spec.MaxResidence {
		b.Drops[DropExpired].Add(uint64(n))
		return 0, false
	}
	o := b.cfg.Oracle
	if b.atOK {
		b.at.Now = b.wallMs(polled)
		o = &b.at
	}
	first, stalls, out, err := claim.Batch(o, b.cfg.Behind, n, func() bool {
		return Expired(oldest) || b.stopped.Load()
	})
	if stalls > 0 {
		b.Stalls.Add(uint64(stalls))
	}
	switch out {
	case claim.Failed:
		b.Drops[DropOracle].Add(uint64(n))
		b.Log.Error("claim", "n", n, "err", err)
		return 0, false
	case claim.Expired:
		b.Drops[DropExpired].Add(uint64(n))
		return 0, false
	}
	return first, true
}

// initClaim notes whether the oracle takes the worker's clock reading.
func (b *Base) initClaim() { b.at.O, b.atOK = b.cfg.Oracle.(claim.AtClaimer) }

// wallMs is the wall clock, in Unix milliseconds, at the monotonic
// reading t: from a reading of both clocks taken at most a millisecond
// before t (one wall-clock read a millisecond, not one a batch, on the
// path of every serial round trip). Between two readings it is off by
// the clocks' relative drift (NTP slews by at most 500 ppm: half a
// microsecond); a step of the wall clock shows within a millisecond.
func (b *Base) wallMs(t verbs.Time) int64 {
	if d := t.Sub(b.syncMono); b.syncWall == 0 || d < 0 || d >= time.Millisecond {
		now := time.Now()
		b.syncMono, b.syncWall = verbs.TimeOf(now), now.UnixNano()
	}
	return (b.syncWall + int64(t.Sub(b.syncMono))) / int64(time.Millisecond)
}

// Next runs the Stall hook, if any, and returns the response QP batch n
// answers are prepared in (respq.Set.Next); false, with the n counted,
// when the send queue never drained.
func (b *Base) Next(n int) (respq.Batch, bool) {
	if f := b.Stall.Load(); f != nil {
		(*f)()
	}
	r, ok := b.Resp.Next(n)
	if failed, late, unsent := b.Resp.TakeFailed(); failed+late > 0 { // reaped while it waited
		b.Drops[DropSend].Add(uint64(failed))
		b.Drops[DropLate].Add(uint64(late))
		b.Unsent.Add(uint64(unsent))
	}
	if !ok {
		b.Log.Error("send queue never drained")
		b.Drops[DropSend].Add(uint64(n))
	}
	return r, ok
}

// Post rings the doorbell for wrs, prepared in r, unless the batch, whose
// oldest request arrived at oldest, is by then older than
// spec.MaxResidence (its values are skipped, never handed out): no answer
// leaves later than that after its request arrived. It reports whether
// any answer was posted.
//
// Every SampleEvery-th batch it also records the batch's service time
// (its oldest request's arrival to this doorbell) in ServiceTime: the
// clock is read here anyway, so sampling adds a counter and a branch per
// batch.
func (b *Base) Post(r respq.Batch, wrs []verbs.SendWR, oldest verbs.Time) bool {
	if !b.Fresh(oldest) {
		b.Drops[DropLate].Add(uint64(len(wrs)))
		return false
	}
	setDeadline(wrs, oldest)
	b.late()
	n, err := r.Post(wrs)
	if err != nil {
		b.Drops[unposted(err)].Add(uint64(len(wrs) - n))
		b.Log.Error("post answers", "posted", n, "of", len(wrs), "err", err)
	}
	return n > 0
}

// Fresh reports whether a batch whose oldest request arrived at oldest
// may still be answered: it is not older than spec.MaxResidence. Call it
// immediately before the answers become visible (the doorbell, or the
// write a client's READ fetches); the caller counts a stale batch's
// drops. Every SampleEvery-th fresh batch's service time (its oldest
// request's arrival to now) goes into ServiceTime: the clock is read
// here anyway, so sampling adds a counter and a branch per batch. Modes
// that answer without response QPs (darpc, rfp) sample through it as
// Post does for the others.
func (b *Base) Fresh(oldest verbs.Time) bool {
	age := verbs.Now().Sub(oldest)
	if age > spec.MaxResidence {
		return false
	}
	if b.sampled++; b.sampled%SampleEvery == 0 {
		b.serviceTime.Observe(uint64(age))
	}
	return true
}

// setDeadline gives the answers wrs of a batch whose oldest request
// arrived at oldest the send deadline oldest+spec.MaxResidence: the
// provider checks it again immediately before the answers leave, after
// any wait of its own (a full socket buffer), and drops what would leave
// later (verbs.WCDeadlineErr, counted DropLate).
func setDeadline(wrs []verbs.SendWR, oldest verbs.Time) {
	dl := oldest.Add(spec.MaxResidence)
	for i := range wrs {
		wrs[i].Deadline = dl
	}
}

// unposted is the drop reason of answers a post refused with err:
// DropLate for a provider that refused them because their deadline had
// passed (verbs.ErrDeadline), DropSend otherwise.
func unposted(err error) int {
	if errors.Is(err, verbs.ErrDeadline) {
		return DropLate
	}
	return DropSend
}

// late runs the Late hook, if any.
func (b *Base) late() {
	if f := b.Late.Load(); f != nil {
		(*f)()
	}
}

// PostWith is Post for a worker on a shared CQ (InitShared): it posts
// the receive chains recvs (re-posts gathered in the batch; each chain's
// Posted is set) and the answers wrs, prepared in r, with one provider
// call. The answers are left out (and counted) when the batch, whose
// oldest request arrived at oldest, is by then older than
// spec.MaxResidence; the receives are posted anyway. wrs may be empty
// (a batch with nothing to answer), and r then the zero Batch. It
// reports whether any answer was posted.
func (b *Base) PostWith(r respq.Batch, wrs []verbs.SendWR, oldest verbs.Time, recvs []verbs.RecvChain) bool {
	if len(wrs) > 0 {
		if !b.Fresh(oldest) {
			b.Drops[DropLate].Add(uint64(len(wrs)))
			wrs = nil
		} else {
			setDeadline(wrs, oldest)
			b.late()
		}
	}
	if len(wrs) == 0 && len(recvs) == 0 {
		return false
	}
	n, err := b.Resp.PostMany(r, recvs, wrs)
	if err != nil {
		if len(wrs) > n {
			b.Drops[unposted(err)].Add(uint64(len(wrs) - n))
		}
		b.Log.Error("post receives and answers", "posted", n, "of", len(wrs), "err", err)
	}
	return n > 0
}

// ReapSends frees send queue slots and counts answers that failed.
func (b *Base) ReapSends() {
	_, failed, late, unsent := b.Resp.Reap()
	if failed > 0 {
		b.Drops[DropSend].Add(uint64(failed))
	}
	if late > 0 {
		b.Drops[DropLate].Add(uint64(late))
	}
	b.Unsent.Add(uint64(unsent))
}

// UDRequestQueue makes a worker's UD request queue on pd: a receive CQ
// of cqSize entries, a send CQ for the mode's response QPs
// (RespQPs×SendDepth), and a UD QP taking recvDepth receives, brought up
// with the request Q_Key. What it made is returned even on an error, for
// the worker's Close to release.
func (c *Config) UDRequestQueue(pd verbs.PD, cqSize, recvDepth int) (reqCQ, sendCQ verbs.CQ, reqQP verbs.QP, err error) {
	if reqCQ, err = c.Device.CreateCQ(cqSize); err != nil {
		return reqCQ, sendCQ, reqQP, fmt.Errorf("request CQ: %w", err)
	}
	if sendCQ, err = c.Device.CreateCQ(c.RespQPs * c.SendDepth); err != nil {
		return reqCQ, sendCQ, reqQP, fmt.Errorf("send CQ: %w", err)
	}
	if reqQP, err = pd.CreateQP(verbs.QPInitAttr{Type: verbs.UD, SendCQ: sendCQ, RecvCQ: reqCQ,
		Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: recvDepth, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		return reqCQ, sendCQ, reqQP, fmt.Errorf("request QP: %w", err)
	}
	if err = verbs.BringUpUD(reqQP, c.QKey, 0); err != nil {
		return reqCQ, sendCQ, reqQP, fmt.Errorf("request QP bring-up: %w", err)
	}
	return reqCQ, sendCQ, reqQP, nil
}

// UDSharedQueue makes a worker's UD request queue on pd with one CQ for
// everything (InitShared): room for cqSize request completions plus the
// send completions of the mode's response QPs (RespQPs×SendDepth), and a
// UD QP taking recvDepth receives on engine queue (verbs.QPInitAttr),
// brought up with the request Q_Key. What it made is returned even on an
// error, for the worker's Close to release.
func (c *Config) UDSharedQueue(pd verbs.PD, cqSize, recvDepth, queue int) (cq verbs.CQ, reqQP verbs.QP, err error) {
	if cq, err = c.Device.CreateCQ(cqSize + c.RespQPs*c.SendDepth); err != nil {
		return cq, reqQP, fmt.Errorf("CQ: %w", err)
	}
	if reqQP, err = pd.CreateQP(verbs.QPInitAttr{Type: verbs.UD, SendCQ: cq, RecvCQ: cq, Queue: queue,
		Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: recvDepth, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		return cq, reqQP, fmt.Errorf("request QP: %w", err)
	}
	if err = verbs.BringUpUD(reqQP, c.QKey, 0); err != nil {
		return cq, reqQP, fmt.Errorf("request QP bring-up: %w", err)
	}
	return cq, reqQP, nil
}

// CloseAll closes, in order, each of rs that is not nil (the verbs
// resources of a worker or mode, some never created).
func CloseAll(rs ...interface{ Close() error }) {
	for _, r := range rs {
		if r != nil {
			r.Close()
		}
	}
}

// Worker is a mode's worker as Create, Run and Pool handle it: it embeds
// Base, has a loop, Run, that returns when the mode stops, and Close,
// which releases what it holds (Base's included) once Run returned.
type Worker interface {
	Run()
	Close()
	base() *Base
}

func (b *Base) base() *Base { return b }

// Create makes n workers with create and lists the response QPs of all
// of them (the QPs answers come from: a client drops any other sender).
// On an error it returns the workers made so far, for the caller to
// close.
func Create[W Worker](n int, create func(id int) (W, error)) (ws []W, answerQPs []handshake.Endpoint, err error) {
	for i := range n {
		w, err := create(i)
		if err != nil {
			return ws, nil, err
		}
		ws = append(ws, w)
	}
	for _, w := range ws {
		if w.base().Resp == nil {
			continue
		}
		for _, qp := range w.base().Resp.QPs() {
			answerQPs = append(answerQPs, handshake.Endpoint{Addr: qp.Address(), QPN: qp.QPN()})
		}
	}
	return ws, answerQPs, nil
}

// Run runs each worker's loop on a goroutine of its own, counted by wg.
func Run[W Worker](wg *sync.WaitGroup, ws []W) {
	for _, w := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.Run()
		}()
	}
}

func (c *Counts) initCounts(drops []string) {
	c.dropNames = append(dropNames[:], drops...)
	c.Drops = make([]atomic.Uint64, len(c.dropNames))
}

// Sum adds up the workers' Counts into a dataplane.Stats: a line per
// worker (ID, Core, Batches, Requests, Drops), the totals (Served,
// Batches, Stalls, Drops) and, as Counters, the drops by reason
// (drops_total). The mode adds what it counts besides.
func Sum[W Worker](ws []W) dataplane.Stats {
	var st dataplane.Stats
	byReason := DropsByReason(ws)
	for _, w := range ws {
		b := w.base()
		x := dataplane.WorkerStats{ID: b.ID, Core: b.Core, Batches: b.Batches.Load(), Requests: b.answered()}
		for i := range b.Drops {
			x.Drops += b.Drops[i].Load()
		}
		st.Workers = append(st.Workers, x)
		st.Served += x.Requests
		st.Batches += x.Batches
		st.Drops += x.Drops
		st.Stalls += b.Stalls.Load()
		if b.serviceTime != nil {
			st.ServiceTime.Add(b.serviceTime.Snapshot(1e-9))
		}
	}
	if len(ws) > 0 {
		for _, r := range ws[0].base().dropNames {
			st.Counters = append(st.Counters, dataplane.Counter{Name: "drops_total", Help: "Requests not answered, by reason.",
				Reason: r, Value: byReason[r]})
		}
	}
	return st
}

// DropsByReason adds up the workers' drops, by reason name.
func DropsByReason[W Worker](ws []W) map[string]uint64 {
	m := map[string]uint64{}
	for _, w := range ws {
		b := w.base()
		for i := range b.Drops {
			m[b.dropNames[i]] += b.Drops[i].Load()
		}
	}
	return m
}

// Totals are the workers' Counts added up.
type Totals struct {
	Batches, Requests, Stalls uint64
	Drops                     map[string]uint64 // by reason
}

// answered is the requests whose answers left: Requests − Unsent (read
// Unsent first, so that a failure counted meanwhile cannot make it
// underflow).
func (c *Counts) answered() uint64 {
	u := c.Unsent.Load()
	return c.Requests.Load() - u
}

// Total adds up the workers' Counts.
func Total[W Worker](ws []W) Totals {
	t := Totals{Drops: DropsByReason(ws)}
	for _, w := range ws {
		b := w.base()
		t.Batches += b.Batches.Load()
		t.Requests += b.answered()
		t.Stalls += b.Stalls.Load()
	}
	return t
}

// Defaults of Idle.
const (
	DefaultSpin     = 200 * time.Microsecond
	DefaultMaxSleep = 500 * time.Microsecond
)

// Idle is the idle policy of a worker that polls memory for requests
// (herd, rfp): after the last work found it keeps polling, yielding the
// processor, for Spin, then sleeps between polls, from 10 µs doubling up
// to MaxSleep. A negative Spin polls forever, as a core-pinned worker on
// a real NIC should. Zero fields take the defaults. Owned by the worker.
type Idle struct {
	Spin, MaxSleep time.Duration
	idle           bool
	since, sleep   time.Duration
}

// Busy notes that the last poll found work.
func (i *Idle) Busy() { i.idle, i.sleep = false, 0 }

// Wait waits after a poll, at now (on any fixed clock), found no work.
func (i *Idle) Wait(now time.Duration) {
	if !i.idle {
		i.idle, i.since = true, now
	}
	spin := i.Spin
	if spin == 0 {
		spin = DefaultSpin
	}
	if spin < 0 || now-i.since < spin {
		runtime.Gosched()
		return
	}
	ms := i.MaxSleep
	if ms <= 0 {
		ms = DefaultMaxSleep
	}
	i.sleep = min(max(2*i.sleep, 10*time.Microsecond), ms)
	time.Sleep(i.sleep)
}
