//go:build ibverbs && cgo

package ibv

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/seqd/seqd/verbs"
)

// openDevice opens the device named by SEQD_IBV_DEVICE (default: the
// first one) with the options in SEQD_IBV_OPTIONS, or skips t saying why
// there is none.
func openDevice(t testing.TB) verbs.Device {
	t.Helper()
	opts, err := verbs.ParseOptions(os.Getenv("SEQD_IBV_OPTIONS"))
	if err != nil {
		t.Fatalf("SEQD_IBV_OPTIONS: %v", err)
	}
	d, err := verbs.Open("ibv", os.Getenv("SEQD_IBV_DEVICE"), opts)
	if errors.Is(err, verbs.ErrNoDevice) {
		t.Skip(skipReason(err))
	}
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return d
}

// skipReason says why there is no device, as "no RDMA device:
// ibv_get_device_list: function not implemented (ENOSYS)".
func skipReason(err error) string {
	return "no RDMA device: " + strings.TrimPrefix(err.Error(), verbs.ErrNoDevice.Error()+": ")
}

// hasDevice reports whether an RDMA device can be opened, and why not.
func hasDevice() (bool, error) {
	d, err := verbs.Open("ibv", os.Getenv("SEQD_IBV_DEVICE"), nil)
	if err != nil {
		return false, err
	}
	d.Close()
	return true, nil
}

func TestOpenNoDevice(t *testing.T) {
	if ok, _ := hasDevice(); ok {
		t.Skip("an RDMA device exists")
	}
	d, err := verbs.Open("ibv", "", nil)
	if d != nil || !errors.Is(err, verbs.ErrNoDevice) {
		t.Fatalf("Open = %v, %v; want an error wrapping ErrNoDevice", d, err)
	}
	if !strings.Contains(err.Error(), "ibv_get_device_list") && !strings.Contains(err.Error(), "have ") {
		t.Errorf("error %q does not say what failed", err)
	}
	t.Logf("as expected: %v", err)
}

func TestOpenRejectsUnknownOption(t *testing.T) {
	_, err := verbs.Open("ibv", "", verbs.Options{"queues": "4"})
	if !errors.Is(err, verbs.ErrInvalidArgument) {
		t.Fatalf("Open with an unknown option: %v, want ErrInvalidArgument", err)
	}
}

func TestOpenUnknownDevice(t *testing.T) {
	_, err := verbs.Open("ibv", "no-such-rdma-device0", nil)
	if !errors.Is(err, verbs.ErrNoDevice) {
		t.Fatalf("Open(no-such-rdma-device0): %v, want ErrNoDevice", err)
	}
}

func TestMaps(t *testing.T) {
	seen := map[any]verbs.Opcode{}
	for op := verbs.OpSend; int(op) < len(opcodes); op++ {
		if prev, dup := seen[opcodes[op]]; dup {
			t.Errorf("%v and %v map to the same libibverbs opcode", prev, op)
		}
		seen[opcodes[op]] = op
	}
	if len(seen) != 7 {
		t.Errorf("%d opcodes mapped, want 7", len(seen))
	}
	for s := verbs.StateReset; s <= verbs.StateErr; s++ {
		c, ok := qpStateToC(s)
		back, ok2 := qpStateFromC(c)
		if !ok || !ok2 || back != s {
			t.Errorf("QP state %v does not round-trip (%v, %v, %v)", s, ok, ok2, back)
		}
	}
	if _, ok := qpStateToC(verbs.StateErr + 1); ok {
		t.Error("invalid QP state mapped")
	}
	for m := verbs.MTU256; m <= verbs.MTU4096; m++ {
		c, ok := mtuToC(m)
		back, ok2 := mtuFromC(c)
		if !ok || !ok2 || back != m {
			t.Errorf("MTU %v does not round-trip", m)
		}
	}
	for _, m := range []verbs.MTU{0, verbs.MTU4096 + 1} {
		if _, ok := mtuToC(m); ok {
			t.Errorf("invalid MTU %d mapped", m)
		}
	}
	all := verbs.QPAttrMask(0)
	for _, a := range attrMasks {
		all |= a.v
	}
	if c, err := attrMaskToC(all); err != nil || c == 0 {
		t.Errorf("attrMaskToC(all) = %v, %v", c, err)
	}
	if _, err := attrMaskToC(1 << 30); !errors.Is(err, verbs.ErrInvalidArgument) {
		t.Errorf("unknown attribute bit: %v", err)
	}
	if _, err := accessToC(1 << 9); !errors.Is(err, verbs.ErrInvalidArgument) {
		t.Errorf("unknown access bit: %v", err)
	}
	if sendFlags[verbs.Signaled|verbs.Inline|verbs.Fence|verbs.Solicited] == 0 || sendFlags[0] != 0 {
		t.Error("send flag table")
	}
}

// udPair is a UD QP with its resources, brought up to RTS.
type udPair struct {
	pd verbs.PD
	cq verbs.CQ
	mr verbs.MR
	qp verbs.QP
}

func newUD(t *testing.T, d verbs.Device) *udPair {
	t.Helper()
	u := &udPair{}
	var err error
	if u.pd, err = d.AllocPD(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { u.pd.Close() })
	if u.cq, err = d.CreateCQ(64); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { u.cq.Close() })
	if u.mr, err = u.pd.RegMR(1<<16, verbs.AccessLocalWrite); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { u.mr.Close() })
	u.qp, err = u.pd.CreateQP(verbs.QPInitAttr{Type: verbs.UD, SendCQ: u.cq, RecvCQ: u.cq,
		Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}, SigAll: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { u.qp.Close() })
	if err := verbs.BringUpUD(u.qp, verbs.DefaultQKey, 0); err != nil {
		t.Fatal(err)
	}
	return u
}

// TestUDLoopback sends one SEND_WITH_IMM from a UD QP to itself and checks
// the completion, the immediate and the source address from the GRH.
func TestUDLoopback(t *testing.T) {
	d := openDevice(t)
	t.Cleanup(func() { d.Close() })
	u := newUD(t, d)
	buf, base := u.mr.Bytes(), u.mr.Addr()
	copy(buf[4096:], "hello")
	if n, err := u.qp.PostRecv([]verbs.RecvWR{{ID: 1, SG: []verbs.SGE{{Addr: base, Length: 2048, LKey: u.mr.LKey()}}}}); n != 1 {
		t.Fatalf("PostRecv: %d, %v", n, err)
	}
	ah, err := u.pd.CreateAH(verbs.AHAttr{Dest: u.qp.Address()})
	if err != nil {
		t.Fatal(err)
	}
	defer ah.Close()
	wr := verbs.SendWR{ID: 2, Opcode: verbs.OpSendWithImm, Imm: 0x01020304, AH: ah,
		RemoteQPN: u.qp.QPN(), RemoteQKey: verbs.DefaultQKey,
		SG: []verbs.SGE{{Addr: base + 4096, Length: 5, LKey: u.mr.LKey()}}}
	if n, err := u.qp.PostSend([]verbs.SendWR{wr}); n != 1 {
		t.Fatalf("PostSend: %d, %v", n, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var got []verbs.WC
	wc := make([]verbs.WC, 8)
	for len(got) < 2 {
		n, err := u.cq.Poll(wc)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, wc[:n]...)
		if n == 0 {
			if err := u.cq.Wait(ctx); err != nil {
				t.Fatalf("Wait: %v (have %+v)", err, got)
			}
		}
	}
	for _, w := range got {
		if err := w.Err(); err != nil {
			t.Fatalf("completion %+v: %v", w, err)
		}
		if w.Opcode != verbs.WCRecv {
			continue
		}
		if w.Imm != 0x01020304 || w.Flags&verbs.WCWithImm == 0 {
			t.Errorf("imm %#x flags %b", w.Imm, w.Flags)
		}
		if w.ByteLen != verbs.GRHLen+5 || string(buf[verbs.GRHLen:verbs.GRHLen+5]) != "hello" {
			t.Errorf("received %d bytes %q", w.ByteLen, buf[verbs.GRHLen:verbs.GRHLen+5])
		}
		if w.SrcQP != u.qp.QPN() || w.Src.GID != u.qp.Address().GID {
			t.Errorf("source %v %v, want %v %v", w.SrcQP, w.Src, u.qp.QPN(), u.qp.Address())
		}
	}
}

// TestCloseOrder checks that parents with children refuse to close and
// that double closes are errors.
func TestCloseOrder(t *testing.T) {
	d := openDevice(t)
	pd, err := d.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	mr, err := pd.RegMR(4096, verbs.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); !errors.Is(err, verbs.ErrBusy) {
		t.Errorf("device close with a PD: %v", err)
	}
	if err := pd.Close(); !errors.Is(err, verbs.ErrBusy) {
		t.Errorf("PD close with an MR: %v", err)
	}
	for i, want := range []error{nil, verbs.ErrClosed} {
		if err := mr.Close(); !errors.Is(err, want) && err != want {
			t.Errorf("MR close %d: %v, want %v", i, err, want)
		}
	}
	if err := pd.Close(); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); !errors.Is(err, verbs.ErrClosed) {
		t.Errorf("second device close: %v", err)
	}
}

// TestPostSendAllocs checks that a post allocates nothing.
func TestPostSendAllocs(t *testing.T) {
	d := openDevice(t)
	t.Cleanup(func() { d.Close() })
	u := newUD(t, d)
	ah, err := u.pd.CreateAH(verbs.AHAttr{Dest: u.qp.Address()})
	if err != nil {
		t.Fatal(err)
	}
	defer ah.Close()
	wrs := []verbs.SendWR{{ID: 1, Opcode: verbs.OpSend, AH: ah, RemoteQPN: u.qp.QPN(),
		RemoteQKey: verbs.DefaultQKey, SG: []verbs.SGE{{Addr: u.mr.Addr(), Length: 8, LKey: u.mr.LKey()}}}}
	wc := make([]verbs.WC, 16)
	allocs := testing.AllocsPerRun(100, func() {
		if n, err := u.qp.PostSend(wrs); n != 1 {
			t.Fatalf("PostSend: %v", err)
		}
		for {
			n, _ := u.cq.Poll(wc)
			if n > 0 {
				break
			}
		}
	})
	if allocs != 0 {
		t.Errorf("PostSend+Poll: %v allocations per run, want 0", allocs)
	}
}

func BenchmarkPostSendPoll(b *testing.B) {
	d := openDevice(b)
	defer d.Close()
	pd, _ := d.AllocPD()
	defer pd.Close()
	cq, _ := d.CreateCQ(256)
	defer cq.Close()
	mr, _ := pd.RegMR(4096, verbs.AccessLocalWrite)
	defer mr.Close()
	qp, err := pd.CreateQP(verbs.QPInitAttr{Type: verbs.UD, SendCQ: cq, RecvCQ: cq,
		Cap: verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		b.Fatal(err)
	}
	defer qp.Close()
	if err := verbs.BringUpUD(qp, verbs.DefaultQKey, 0); err != nil {
		b.Fatal(err)
	}
	ah, _ := pd.CreateAH(verbs.AHAttr{Dest: qp.Address()})
	defer ah.Close()
	wrs := make([]verbs.SendWR, 16)
	for i := range wrs {
		wrs[i] = verbs.SendWR{ID: uint64(i), Opcode: verbs.OpSend, AH: ah, RemoteQPN: 1,
			RemoteQKey: verbs.DefaultQKey, SG: []verbs.SGE{{Addr: mr.Addr(), Length: 8, LKey: mr.LKey()}}}
	}
	wrs[len(wrs)-1].Flags = verbs.Signaled
	wc := make([]verbs.WC, 16)
	b.ReportAllocs()
	for b.Loop() {
		if n, err := qp.PostSend(wrs); n != len(wrs) {
			b.Fatal(err)
		}
		for {
			if n, _ := cq.Poll(wc); n > 0 {
				break
			}
		}
	}
}
