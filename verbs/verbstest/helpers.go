package verbstest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/seqd/seqd/verbs"
)

// DefaultTimeout bounds every wait of the suite. It is generous because
// the machines tests run on are shared; a healthy provider answers in
// microseconds, so it only matters when something is lost.
const DefaultTimeout = 10 * time.Second

// AllAccess is every access right; the suite registers its memory regions
// and connects its queue pairs with it unless a test is about access.
const AllAccess = verbs.AccessLocalWrite | verbs.AccessRemoteWrite |
	verbs.AccessRemoteRead | verbs.AccessRemoteAtomic

// MRLen is the size of the memory region NewEnd registers.
const MRLen = 64 << 10

// End is one side of a test pair: a protection domain, a send and a
// receive CQ, one queue pair and one memory region, all made from Dev and
// all closed by t.Cleanup when the test ends.
type End struct {
	Dev    verbs.Device
	PD     verbs.PD
	SendCQ verbs.CQ
	RecvCQ verbs.CQ
	QP     verbs.QP
	MR     verbs.MR // MRLen bytes with AllAccess
}

// NewEnd makes an End with a queue pair of type typ in the RESET state.
func NewEnd(t testing.TB, dev verbs.Device, typ verbs.QPType) *End {
	t.Helper()
	return NewEndAttr(t, dev, verbs.QPInitAttr{Type: typ})
}

// NewEndAttr is NewEnd with the queue pair's attributes given. Nil CQs are
// created, and zero capacities get defaults (64 WRs, 4 SGEs each way)
// bounded by the device's limits.
func NewEndAttr(t testing.TB, dev verbs.Device, attr verbs.QPInitAttr) *End {
	t.Helper()
	da := dev.Attr()
	e := &End{Dev: dev}
	pd, err := dev.AllocPD()
	if err != nil {
		t.Fatalf("verbstest: AllocPD: %v", err)
	}
	e.PD = pd
	CloseLater(t, "PD", pd)
	cqe := capped(256, da.MaxCQE)
	if attr.SendCQ == nil {
		attr.SendCQ = NewCQ(t, dev, cqe)
	}
	if attr.RecvCQ == nil {
		attr.RecvCQ = NewCQ(t, dev, cqe)
	}
	e.SendCQ, e.RecvCQ = attr.SendCQ, attr.RecvCQ
	c := &attr.Cap
	c.MaxSendWR = orInt(c.MaxSendWR, capped(64, da.MaxQPWR))
	c.MaxRecvWR = orInt(c.MaxRecvWR, capped(64, da.MaxQPWR))
	c.MaxSendSGE = orInt(c.MaxSendSGE, capped(4, da.MaxSGE))
	c.MaxRecvSGE = orInt(c.MaxRecvSGE, capped(4, da.MaxSGE))
	mr, err := pd.RegMR(MRLen, AllAccess)
	if err != nil {
		t.Fatalf("verbstest: RegMR(%d): %v", MRLen, err)
	}
	e.MR = mr
	CloseLater(t, "MR", mr)
	qp, err := pd.CreateQP(attr)
	if err != nil {
		t.Fatalf("verbstest: CreateQP(%v): %v", attr.Type, err)
	}
	e.QP = qp
	CloseLater(t, "QP", qp)
	if qp.Type() != attr.Type {
		t.Errorf("verbstest: CreateQP(%v) made a %v QP", attr.Type, qp.Type())
	}
	if s := qp.State(); s != verbs.StateReset {
		t.Errorf("verbstest: new QP is in state %v, want RESET", s)
	}
	return e
}

// NewCQ creates a completion queue closed by t.Cleanup.
func NewCQ(t testing.TB, dev verbs.Device, cqe int) verbs.CQ {
	t.Helper()
	cq, err := dev.CreateCQ(cqe)
	if err != nil {
		t.Fatalf("verbstest: CreateCQ(%d): %v", cqe, err)
	}
	CloseLater(t, "CQ", cq)
	return cq
}

// CloseLater closes c when the test ends, reporting any error other than
// verbs.ErrClosed (tests may close things early on purpose). Cleanups run
// last-in first-out, so resources close before what they were made from.
func CloseLater(t testing.TB, what string, c interface{ Close() error }) {
	t.Cleanup(func() {
		if err := c.Close(); err != nil && !errors.Is(err, verbs.ErrClosed) {
			t.Errorf("verbstest: closing %s: %v", what, err)
		}
	})
}

// UDPair makes a UD End on each device and brings both to RTS with
// verbs.DefaultQKey.
func UDPair(t testing.TB, a, b verbs.Device) (x, y *End) {
	t.Helper()
	x, y = NewEnd(t, a, verbs.UD), NewEnd(t, b, verbs.UD)
	BringUp(t, x)
	BringUp(t, y)
	return x, y
}

// BringUp moves e's UD queue pair to RTS with verbs.DefaultQKey.
func BringUp(t testing.TB, e *End) {
	t.Helper()
	if err := verbs.BringUpUD(e.QP, verbs.DefaultQKey, 0); err != nil {
		t.Fatalf("verbstest: BringUpUD(%v): %v", e.QP.QPN(), err)
	}
	if s := e.QP.State(); s != verbs.StateRTS {
		t.Fatalf("verbstest: after BringUpUD the QP is in state %v, want RTS", s)
	}
}

// ConnectPair makes an End with a queue pair of type typ (UC or RC) on
// each device and connects them with the given path MTU and AllAccess.
func ConnectPair(t testing.TB, a, b verbs.Device, typ verbs.QPType, mtu verbs.MTU) (x, y *End) {
	t.Helper()
	x, y = NewEnd(t, a, typ), NewEnd(t, b, typ)
	Connect(t, x, y, mtu)
	return x, y
}

// Connect connects the queue pairs of x and y to each other.
func Connect(t testing.TB, x, y *End, mtu verbs.MTU) {
	t.Helper()
	const xpsn, ypsn = 0xfffff0, 0x10 // x's PSNs wrap around 2^24 early
	if err := verbs.Connect(x.QP, verbs.ConnectAttr{Remote: y.QP.Address(), RemoteQPN: y.QP.QPN(),
		RQPSN: ypsn, SQPSN: xpsn, MTU: mtu, Access: AllAccess}); err != nil {
		t.Fatalf("verbstest: Connect(%v→%v): %v", x.QP.QPN(), y.QP.QPN(), err)
	}
	if err := verbs.Connect(y.QP, verbs.ConnectAttr{Remote: x.QP.Address(), RemoteQPN: x.QP.QPN(),
		RQPSN: xpsn, SQPSN: ypsn, MTU: mtu, Access: AllAccess}); err != nil {
		t.Fatalf("verbstest: Connect(%v→%v): %v", y.QP.QPN(), x.QP.QPN(), err)
	}
	for _, e := range []*End{x, y} {
		if s := e.QP.State(); s != verbs.StateRTS {
			t.Fatalf("verbstest: after Connect %v is in state %v, want RTS", e.QP.QPN(), s)
		}
	}
}

// AH creates an address handle to dest on e's PD, closed by t.Cleanup.
func AH(t testing.TB, e *End, dest verbs.Address) verbs.AH {
	t.Helper()
	ah, err := e.PD.CreateAH(verbs.AHAttr{Dest: dest, PortNum: 1})
	if err != nil {
		t.Fatalf("verbstest: CreateAH(%v): %v", dest, err)
	}
	CloseLater(t, "AH", ah)
	return ah
}

// SGE returns the scatter/gather element for n bytes at offset off of mr.
func SGE(mr verbs.MR, off, n int) verbs.SGE {
	return verbs.SGE{Addr: mr.Addr() + uint64(off), Length: uint32(n), LKey: mr.LKey()}
}

// SG is SGE as a one-element list, or an empty list when n is 0.
func SG(mr verbs.MR, off, n int) []verbs.SGE {
	if n == 0 {
		return nil
	}
	return []verbs.SGE{SGE(mr, off, n)}
}

// PostSend posts wrs as one chain and fails the test unless all were
// posted.
func PostSend(t testing.TB, qp verbs.QP, wrs ...verbs.SendWR) {
	t.Helper()
	n, err := qp.PostSend(wrs)
	if err != nil || n != len(wrs) {
		t.Fatalf("verbstest: PostSend on %v: posted %d of %d: %v", qp.QPN(), n, len(wrs), err)
	}
}

// PostRecv posts wrs as one chain and fails the test unless all were
// posted.
func PostRecv(t testing.TB, qp verbs.QP, wrs ...verbs.RecvWR) {
	t.Helper()
	n, err := qp.PostRecv(wrs)
	if err != nil || n != len(wrs) {
		t.Fatalf("verbstest: PostRecv on %v: posted %d of %d: %v", qp.QPN(), n, len(wrs), err)
	}
}

// PollN polls cq until it has n completions, waiting with CQ.Wait in
// between, and fails the test if they do not all come within timeout. It
// never takes more than n completions from cq.
func PollN(t testing.TB, cq verbs.CQ, n int, timeout time.Duration) []verbs.WC {
	t.Helper()
	wcs := make([]verbs.WC, n)
	got, err := pollUntil(cq, wcs, len(wcs), timeout)
	if err != nil {
		t.Fatalf("verbstest: %v; got %d of %d completions: %s", err, got, n, FormatWCs(wcs[:got]))
	}
	return wcs
}

// PollOne is PollN for one completion.
func PollOne(t testing.TB, cq verbs.CQ, timeout time.Duration) verbs.WC {
	t.Helper()
	return PollN(t, cq, 1, timeout)[0]
}

// PollBatched polls cq with a slice of batch completions at a time until
// it has n, checking that no call returns more than it was given room
// for. It returns the completions in the order Poll returned them and the
// number of Poll calls that returned some.
func PollBatched(t testing.TB, cq verbs.CQ, n, batch int, timeout time.Duration) (wcs []verbs.WC, calls int) {
	t.Helper()
	buf := make([]verbs.WC, batch)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for len(wcs) < n {
		room := min(batch, n-len(wcs))
		k, err := cq.Poll(buf[:room])
		if err != nil {
			t.Fatalf("verbstest: Poll: %v after %d of %d completions", err, len(wcs), n)
		}
		if k < 0 || k > room {
			t.Fatalf("verbstest: Poll with room for %d returned %d", room, k)
		}
		if k > 0 {
			wcs = append(wcs, buf[:k]...)
			calls++
			continue
		}
		if err := wait(ctx, cq); err != nil {
			t.Fatalf("verbstest: %v; got %d of %d completions: %s", err, len(wcs), n, FormatWCs(wcs))
		}
	}
	return wcs, calls
}

// pollUntil fills wcs[:n] from cq, returning how many it got and an error
// if the time ran out first or the CQ failed.
func pollUntil(cq verbs.CQ, wcs []verbs.WC, n int, timeout time.Duration) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	got := 0
	for got < n {
		k, err := cq.Poll(wcs[got:n])
		if err != nil {
			return got, fmt.Errorf("Poll: %w", err)
		}
		if k < 0 || k > n-got {
			return got, fmt.Errorf("Poll with room for %d returned %d", n-got, k)
		}
		got += k
		if k > 0 {
			continue
		}
		if err := wait(ctx, cq); err != nil {
			return got, err
		}
	}
	return got, nil
}

// wait is one CQ.Wait bounded by ctx.
func wait(ctx context.Context, cq verbs.CQ) error {
	if ctx.Err() != nil {
		return errTimeout(ctx)
	}
	err := cq.Wait(ctx)
	if ctx.Err() != nil {
		return errTimeout(ctx)
	}
	if err != nil {
		return fmt.Errorf("Wait: %w", err)
	}
	return nil
}

func errTimeout(ctx context.Context) error {
	d, _ := ctx.Deadline()
	return fmt.Errorf("no completion within the deadline (%s ago)", time.Since(d).Round(time.Millisecond))
}

// ExpectEmpty fails the test if cq holds a completion now. Call it only
// after a positive signal proved that anything that could have come has
// come (a later completion on the same queue pair, for example).
func ExpectEmpty(t testing.TB, cq verbs.CQ, what string) {
	t.Helper()
	var wc [4]verbs.WC
	n, err := cq.Poll(wc[:])
	if err != nil {
		t.Fatalf("verbstest: Poll: %v", err)
	}
	if n > 0 {
		t.Errorf("verbstest: %s: unexpected completions: %s", what, FormatWCs(wc[:n]))
	}
}

// ExpectWC checks that wc is a successful completion of work request id
// with the given opcode.
func ExpectWC(t testing.TB, wc verbs.WC, id uint64, op verbs.WCOpcode) {
	t.Helper()
	if wc.Status != verbs.WCSuccess || wc.ID != id || wc.Opcode != op {
		t.Errorf("verbstest: got completion %s, want id=%d %v success", FormatWC(wc), id, op)
	}
}

// FormatWC describes a completion for failure messages.
func FormatWC(wc verbs.WC) string {
	return fmt.Sprintf("{id=%d %v %v flags=%#x len=%d imm=%#x qp=%v src=%v/%v}",
		wc.ID, wc.Status, wc.Opcode, uint8(wc.Flags), wc.ByteLen, wc.Imm, wc.QPN, wc.Src, wc.SrcQP)
}

// FormatWCs describes completions for failure messages.
func FormatWCs(wcs []verbs.WC) string {
	var b strings.Builder
	b.WriteByte('[')
	for i, wc := range wcs {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(FormatWC(wc))
	}
	b.WriteByte(']')
	return b.String()
}

// Counter returns the value of a device counter, and false when the
// device has no counters or not that one.
func Counter(dev verbs.Device, name string) (uint64, bool) {
	c, ok := dev.(verbs.Counters)
	if !ok {
		return 0, false
	}
	var v uint64
	found := false
	c.VisitCounters(func(n string, x uint64) {
		if n == name {
			v, found = x, true
		}
	})
	return v, found
}

// WaitCounter waits until the device counter name reaches at least want,
// and fails the test if it does not within timeout. Counters have no
// notification, so it reads them every millisecond.
func WaitCounter(t testing.TB, dev verbs.Device, name string, want uint64, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		v, ok := Counter(dev, name)
		if !ok {
			t.Fatalf("verbstest: device %s has no counter %q", dev.Name(), name)
		}
		if v >= want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("verbstest: counter %s of %s is %d after %v, want at least %d", name, dev.Name(), v, timeout, want)
		}
		time.Sleep(time.Millisecond)
	}
}

// Pattern returns n bytes that differ from those of another seed.
func Pattern(n int, seed byte) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(i*7) + seed
	}
	return p
}

// Fill sets every byte of b to v.
func Fill(b []byte, v byte) {
	for i := range b {
		b[i] = v
	}
}

func capped(want, limit int) int {
	if limit > 0 && limit < want {
		return limit
	}
	return want
}

func orInt(v, d int) int {
	if v == 0 {
		return d
	}
	return v
}
