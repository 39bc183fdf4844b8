//go:build ibverbs && cgo && ibverbs_fake

package ibv

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/seqd/seqd/verbs"
)

var fakeCaps = verbs.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 2, MaxRecvSGE: 2, MaxInlineData: 64}

func TestFakePostSendUD(t *testing.T) {
	e := newFakeEnv(verbs.UD, fakeCaps)
	h := e.fakeAH()
	sge := func(off uint64, n uint32) verbs.SGE {
		return verbs.SGE{Addr: e.mr.Addr() + off, Length: n, LKey: e.mr.LKey()}
	}
	wrs := []verbs.SendWR{
		{ID: 10, Opcode: verbs.OpSend, AH: h, RemoteQPN: 0x456, RemoteQKey: 0x11111111, SG: []verbs.SGE{sge(0, 16)}},
		{ID: 11, Opcode: verbs.OpSendWithImm, Flags: verbs.Signaled, Imm: 0x01020304, AH: h, RemoteQPN: 0x456, RemoteQKey: 7},
		{ID: 12, Opcode: verbs.OpSend, Flags: verbs.Inline | verbs.Signaled, AH: h, RemoteQPN: 1, SG: []verbs.SGE{sge(64, 8), sge(128, 8)}},
	}
	n, err := e.qp.PostSend(wrs)
	if n != 3 || err != nil {
		t.Fatalf("PostSend = %d, %v", n, err)
	}
	if c := fakeCalls(); c != 1 {
		t.Errorf("%d driver calls, want one doorbell", c)
	}
	got := fakeSent()
	if len(got) != 3 {
		t.Fatalf("driver got %d WRs", len(got))
	}
	for i, g := range got {
		if g.ID != wrs[i].ID || g.AH != h.ahPointer() || g.RemoteQPN != uint32(wrs[i].RemoteQPN) || g.QKey != wrs[i].RemoteQKey {
			t.Errorf("WR %d: %+v", i, g)
		}
		if g.HasNext != (i < 2) {
			t.Errorf("WR %d: next linked %v", i, g.HasNext)
		}
	}
	if got[0].Opcode != fakeWRSend || got[1].Opcode != fakeWRSendImm {
		t.Errorf("opcodes %d %d", got[0].Opcode, got[1].Opcode)
	}
	if got[1].ImmWire != [4]byte{1, 2, 3, 4} {
		t.Errorf("imm on the wire %x, want big endian 01020304", got[1].ImmWire)
	}
	if got[0].Flags != 0 || got[2].Flags != fakeSendInline|fakeSendSignaled {
		t.Errorf("flags %#x %#x", got[0].Flags, got[2].Flags)
	}
	if len(got[1].SG) != 0 || len(got[2].SG) != 2 || got[2].SG[1] != wrs[2].SG[1] || got[0].SG[0] != wrs[0].SG[0] {
		t.Errorf("SGEs %+v %+v %+v", got[0].SG, got[1].SG, got[2].SG)
	}
}

func TestFakePostSendRCUnions(t *testing.T) {
	e := newFakeEnv(verbs.RC, fakeCaps)
	res := verbs.SGE{Addr: e.mr.Addr(), Length: 8, LKey: e.mr.LKey()}
	wrs := []verbs.SendWR{
		{ID: 1, Opcode: verbs.OpRDMAWrite, RemoteAddr: 0xdead0000, RKey: 0x99, SG: []verbs.SGE{res}},
		{ID: 2, Opcode: verbs.OpAtomicFetchAdd, RemoteAddr: 0xbeef0008, RKey: 0x98, CompareAdd: 5, Swap: 6, SG: []verbs.SGE{res}},
	}
	if n, err := e.qp.PostSend(wrs); n != 2 || err != nil {
		t.Fatalf("PostSend = %d, %v", n, err)
	}
	got := fakeSent()
	if got[0].Opcode != fakeWRWrite || got[0].RemoteAddr != 0xdead0000 || got[0].RKey != 0x99 {
		t.Errorf("write: %+v", got[0])
	}
	if got[1].Opcode != fakeWRFetchAdd || got[1].AtomicAddr != 0xbeef0008 || got[1].AtomicRKey != 0x98 ||
		got[1].Compare != 5 || got[1].Swap != 6 {
		t.Errorf("fetch-add: %+v", got[1])
	}
}

func TestFakePostSendErrors(t *testing.T) {
	e := newFakeEnv(verbs.UD, fakeCaps)
	h := e.fakeAH()
	good := verbs.SendWR{Opcode: verbs.OpSend, AH: h, RemoteQPN: 2}
	chain := func(n int) []verbs.SendWR {
		w := make([]verbs.SendWR, n)
		for i := range w {
			w[i] = good
			w[i].ID = uint64(i)
		}
		return w
	}
	closedAH := e.fakeAH()
	closedAH.closed.Store(true)
	otherPD := &ah{pd: &pd{}, ah: h.ah}
	tests := []struct {
		name     string
		mutate   func(w []verbs.SendWR)
		failAt   int // driver refuses this index, -1 never
		errno    int
		want     int
		wantErr  error
		chainLen int
	}{
		{"DriverFull", nil, 1, fakeErrnoNoMem, 1, verbs.ErrQueueFull, 3},
		{"DriverInval", nil, 2, fakeErrnoInvalArg, 2, verbs.ErrInvalidArgument, 3},
		{"NoAH", func(w []verbs.SendWR) { w[2].AH = nil }, -1, 0, 2, verbs.ErrInvalidArgument, 3},
		{"ClosedAH", func(w []verbs.SendWR) { w[1].AH = closedAH }, -1, 0, 1, verbs.ErrClosed, 3},
		{"AHOfOtherPD", func(w []verbs.SendWR) { w[0].AH = otherPD }, -1, 0, 0, verbs.ErrInvalidArgument, 3},
		{"WriteOnUD", func(w []verbs.SendWR) { w[1].Opcode = verbs.OpRDMAWrite }, -1, 0, 1, verbs.ErrInvalidArgument, 3},
		{"BadOpcode", func(w []verbs.SendWR) { w[0].Opcode = 0 }, -1, 0, 0, verbs.ErrInvalidArgument, 3},
		{"TooManySGEs", func(w []verbs.SendWR) { w[1].SG = make([]verbs.SGE, 3) }, -1, 0, 1, verbs.ErrInvalidArgument, 3},
		{"InlineTooBig", func(w []verbs.SendWR) {
			w[1].Flags = verbs.Inline
			w[1].SG = []verbs.SGE{{Length: 65}}
		}, -1, 0, 1, verbs.ErrInvalidArgument, 3},
		{"ChainLongerThanQueue", nil, -1, 0, 8, verbs.ErrQueueFull, 9},
		// A send whose deadline passed is refused before the doorbell,
		// and ends the chain; a later deadline is no obstacle.
		{"DeadlinePassed", func(w []verbs.SendWR) {
			now := verbs.Now()
			w[0].Deadline = now.Add(time.Hour)
			w[2].Deadline = now - 1
		}, -1, 0, 2, verbs.ErrDeadline, 4},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fakeClearLog()
			fakeFail(tc.failAt, tc.errno)
			defer fakeFail(-1, 0)
			w := chain(tc.chainLen)
			if tc.mutate != nil {
				tc.mutate(w)
			}
			n, err := e.qp.PostSend(w)
			if n != tc.want || !errors.Is(err, tc.wantErr) {
				t.Fatalf("PostSend = %d, %v; want %d, %v", n, err, tc.want, tc.wantErr)
			}
			if s := len(fakeSent()); s != tc.want {
				t.Errorf("driver accepted %d WRs, want %d", s, tc.want)
			}
		})
	}
}

func TestFakePostState(t *testing.T) {
	e := newFakeEnv(verbs.UD, fakeCaps)
	for _, s := range []verbs.QPState{verbs.StateReset, verbs.StateInit, verbs.StateRTR} {
		e.qp.state.Store(uint32(s))
		if _, err := e.qp.PostSend([]verbs.SendWR{{Opcode: verbs.OpSend, AH: e.fakeAH()}}); !errors.Is(err, verbs.ErrQPState) {
			t.Errorf("PostSend in %v: %v", s, err)
		}
	}
	e.qp.state.Store(uint32(verbs.StateReset))
	if _, err := e.qp.PostRecv([]verbs.RecvWR{{ID: 1}}); !errors.Is(err, verbs.ErrQPState) {
		t.Errorf("PostRecv in RESET: %v", err)
	}
}

func TestFakeRecvPollGRH(t *testing.T) {
	e := newFakeEnv(verbs.UD, fakeCaps)
	buf := e.mr.Bytes()
	// Receive 1 lands at offset 0 with an IPv4 GRH; receive 2 at 4096
	// with an IPv6 GRH; receive 3 is flushed.
	src4 := netip.MustParseAddr("192.0.2.9")
	copy(buf[0:], ipv4GRH(src4, netip.MustParseAddr("192.0.2.1"), 0))
	src6 := verbs.GIDFromAddr(netip.MustParseAddr("2001:db8::9"))
	copy(buf[4096:], realGRH(src6, verbs.GID{}))
	rwrs := []verbs.RecvWR{
		{ID: 100, SG: []verbs.SGE{{Addr: e.mr.Addr(), Length: 1024, LKey: e.mr.LKey()}}},
		{ID: 101, SG: []verbs.SGE{{Addr: e.mr.Addr() + 4096, Length: 1024, LKey: e.mr.LKey()}, {Addr: e.mr.Addr() + 6000, Length: 10, LKey: e.mr.LKey()}}},
		{ID: 102, SG: []verbs.SGE{{Addr: e.mr.Addr() + 2048, Length: 1024, LKey: e.mr.LKey()}}},
	}
	if n, err := e.qp.PostRecv(rwrs); n != 3 || err != nil {
		t.Fatalf("PostRecv = %d, %v", n, err)
	}
	ids, sges := fakeRecvd()
	if len(ids) != 3 || ids[1] != 101 || sges[1] != rwrs[1].SG[0] {
		t.Fatalf("driver got %v %v", ids, sges)
	}
	if c := fakeCalls(); c != 1 {
		t.Errorf("%d driver calls, want 1", c)
	}
	qpn := uint32(e.qp.QPN())
	fakePushWC(fakeCompletion{ID: 7, Status: fakeWCSuccess, Opcode: fakeWCSend, QPN: qpn})
	fakePushWC(fakeCompletion{ID: 100, Status: fakeWCSuccess, Opcode: fakeWCRecv, Len: 45, Imm: 0xa0b0c0d0,
		QPN: qpn, SrcQP: 0x999, Flags: fakeWCGRH | fakeWCWithImm, SLID: 0})
	fakePushWC(fakeCompletion{ID: 101, Status: fakeWCSuccess, Opcode: fakeWCRecv, Len: 41, QPN: qpn, SrcQP: 0x998, Flags: fakeWCGRH, SLID: 5})
	fakePushWC(fakeCompletion{ID: 102, Status: fakeWCFlushErr, Opcode: 0, QPN: qpn})

	wc := make([]verbs.WC, 2)
	var got []verbs.WC
	before := verbs.Now()
	for range 3 {
		n, err := e.cq.Poll(wc)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, wc[:n]...)
	}
	if len(got) != 4 {
		t.Fatalf("polled %d completions: %+v", len(got), got)
	}
	if got[0].Opcode != verbs.WCSend || got[0].ID != 7 || got[0].Src != (verbs.Address{}) {
		t.Errorf("send completion %+v", got[0])
	}
	r := got[1]
	if r.Opcode != verbs.WCRecv || r.Imm != 0xa0b0c0d0 || r.Flags != verbs.WCGRH|verbs.WCWithImm ||
		r.ByteLen != 45 || r.SrcQP != 0x999 || r.QPN != e.qp.QPN() {
		t.Errorf("receive completion %+v", r)
	}
	if r.Src.GID != verbs.GIDFromAddr(src4) {
		t.Errorf("IPv4 source %v, want %v", r.Src, src4)
	}
	if got[2].Src != (verbs.Address{GID: src6, LID: 5}) {
		t.Errorf("IPv6 source %v, want %v", got[2].Src, src6)
	}
	if got[3].Status != verbs.WCWRFlushErr || got[3].VendorErr != 0x42 || got[3].Err() == nil {
		t.Errorf("flushed completion %+v", got[3])
	}
	// Receives are stamped by the polls that moved them; sends and flushed
	// receives are not.
	after := verbs.Now()
	for i, w := range got {
		recv := w.Status == verbs.WCSuccess && w.Opcode == verbs.WCRecv
		if recv && (w.Arrived < before || w.Arrived > after) || !recv && w.Arrived != 0 {
			t.Errorf("completion %d (%v %v) stamped %d, polled between %d and %d", i, w.Opcode, w.Status, w.Arrived, before, after)
		}
	}
	if e.qp.head != e.qp.tail {
		t.Errorf("receive ring not drained: head %d tail %d", e.qp.head, e.qp.tail)
	}
}

func TestFakeAllocs(t *testing.T) {
	e := newFakeEnv(verbs.UD, verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 1, MaxRecvSGE: 1})
	h := e.fakeAH()
	wrs := make([]verbs.SendWR, 16)
	for i := range wrs {
		wrs[i] = verbs.SendWR{ID: uint64(i), Opcode: verbs.OpSendWithImm, Imm: uint32(i), AH: h, RemoteQPN: 3,
			SG: []verbs.SGE{{Addr: e.mr.Addr(), Length: 64, LKey: e.mr.LKey()}}}
	}
	rwrs := []verbs.RecvWR{{ID: 1, SG: []verbs.SGE{{Addr: e.mr.Addr(), Length: 1024, LKey: e.mr.LKey()}}}}
	wc := make([]verbs.WC, 16)
	copy(e.mr.Bytes(), ipv4GRH(netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"), 0))
	allocs := testing.AllocsPerRun(50, func() {
		fakeClearLog()
		if n, err := e.qp.PostSend(wrs); n != len(wrs) {
			t.Fatal(err)
		}
		if n, err := e.qp.PostRecv(rwrs); n != 1 {
			t.Fatal(err)
		}
		fakePushWC(fakeCompletion{ID: 1, Status: fakeWCSuccess, Opcode: fakeWCRecv, Len: 100, QPN: uint32(e.qp.QPN()), Flags: fakeWCGRH})
		if n, err := e.cq.Poll(wc); n != 1 || wc[0].Src.GID == (verbs.GID{}) {
			t.Fatalf("Poll = %d, %v, %+v", n, err, wc[0])
		}
	})
	if allocs != 0 {
		t.Errorf("PostSend+PostRecv+Poll: %v allocations per run, want 0", allocs)
	}
}

// TestFakeRecvStampDrained: while the caller keeps polling, a receive is
// stamped with the clock read of the last poll that drained the CQ (it
// was written after that poll looked), so its age is never understated;
// after a Wait it is stamped by the poll that moved it.
func TestFakeRecvStampDrained(t *testing.T) {
	e := newFakeEnv(verbs.UD, fakeCaps)
	var rwrs []verbs.RecvWR
	for i := range 4 {
		rwrs = append(rwrs, verbs.RecvWR{ID: uint64(200 + i), SG: []verbs.SGE{{Addr: e.mr.Addr() + uint64(i*1024), Length: 1024, LKey: e.mr.LKey()}}})
	}
	if n, err := e.qp.PostRecv(rwrs); n != 4 || err != nil {
		t.Fatalf("PostRecv = %d, %v", n, err)
	}
	qpn := uint32(e.qp.QPN())
	recv := func(id uint64) {
		fakePushWC(fakeCompletion{ID: id, Status: fakeWCSuccess, Opcode: fakeWCRecv, Len: 40, QPN: qpn, SrcQP: 9, Flags: fakeWCGRH})
	}
	wc := make([]verbs.WC, 4)
	poll := func() verbs.WC {
		t.Helper()
		n, err := e.cq.Poll(wc)
		if n != 1 || err != nil {
			t.Fatalf("Poll = %d, %v", n, err)
		}
		return wc[0]
	}
	before := verbs.Now()
	recv(200)
	first := poll() // drains the CQ (1 of 4 asked): its read bounds what follows
	mid := verbs.Now()
	recv(201)
	if second := poll(); second.Arrived != first.Arrived || second.Arrived < before || second.Arrived > mid {
		t.Fatalf("second receive stamped %d, want the draining poll's %d (in [%d, %d])", second.Arrived, first.Arrived, before, mid)
	}
	e.cq.waited.Store(true) // what Wait leaves behind
	after := verbs.Now()
	recv(202)
	if third := poll(); third.Arrived < after {
		t.Fatalf("after a Wait, stamped %d, before the poll started (%d)", third.Arrived, after)
	}
}

// TestFakeGRHSplitAcrossSGEs: a receive whose first SGE is shorter than
// the GRH gets the GRH split across its SGEs, which need not be adjacent
// (ibv_post_recv(3): "the first 40 bytes of the buffer(s) in the scatter
// list"); Poll gathers it and finds the sender.
func TestFakeGRHSplitAcrossSGEs(t *testing.T) {
	e := newFakeEnv(verbs.UD, fakeCaps)
	a := e.mr.Addr()
	lk := e.mr.LKey()
	rwrs := []verbs.RecvWR{
		{ID: 1, SG: []verbs.SGE{{Addr: a + 100, Length: 16, LKey: lk}, {Addr: a + 3000, Length: 512, LKey: lk}}},
		{ID: 2, SG: []verbs.SGE{{Addr: a + 5000, Length: 0, LKey: lk}, {Addr: a + 6000, Length: 1024, LKey: lk}}},
	}
	if n, err := e.qp.PostRecv(rwrs); n != 2 || err != nil {
		t.Fatalf("PostRecv = %d, %v", n, err)
	}
	srcs := []netip.Addr{netip.MustParseAddr("192.0.2.77"), netip.MustParseAddr("192.0.2.78")}
	for i, src := range srcs {
		if n := fakeDeliverGRH(i, ipv4GRH(src, netip.MustParseAddr("192.0.2.1"), 0)); n != verbs.GRHLen {
			t.Fatalf("receive %d: the fake wrote %d GRH bytes", i, n)
		}
		fakePushWC(fakeCompletion{ID: uint64(i + 1), Status: fakeWCSuccess, Opcode: fakeWCRecv, Len: 40,
			QPN: uint32(e.qp.QPN()), SrcQP: 9, Flags: fakeWCGRH})
	}
	wc := make([]verbs.WC, 4)
	n, err := e.cq.Poll(wc)
	if err != nil || n != 2 {
		t.Fatalf("Poll = %d, %v", n, err)
	}
	for i, src := range srcs {
		if wc[i].Src.GID != verbs.GIDFromAddr(src) {
			t.Errorf("receive %d: source %v, want %v", i, wc[i].Src, src)
		}
	}
	// The first SGE alone holds 16 bytes: the old reading of 40 bytes
	// from it would have taken bytes the NIC never wrote.
	if got := e.mr.Bytes()[100+16]; got != 0 {
		t.Errorf("byte after the first SGE was written: %#x", got)
	}
}

// TestFakeAsyncEvents: the asynchronous events hardware raises become
// errors and counters: after IBV_EVENT_CQ_ERR the CQ's Poll fails with
// ErrCQOverrun; after IBV_EVENT_QP_FATAL the QP reports ERR (posts then
// complete flushed, as on hardware; Modify to RESET recovers it); a port going down and up shows in port_down.
func TestFakeAsyncEvents(t *testing.T) {
	e := newFakeEnv(verbs.UD, fakeCaps)
	wc := make([]verbs.WC, 4)
	if _, err := e.cq.Poll(wc); err != nil {
		t.Fatal(err)
	}
	e.dev.onAsync(asyncCQErr, e.fakeCQAddr(), 0, 0)
	if _, err := e.cq.Poll(wc); !errors.Is(err, verbs.ErrCQOverrun) {
		t.Errorf("Poll after CQ_ERR: %v, want ErrCQOverrun", err)
	}
	e.dev.onAsync(asyncQPFatal, 0, uint32(e.qp.QPN()), 0)
	if s := e.qp.State(); s != verbs.StateErr {
		t.Errorf("QP state after QP_FATAL: %v", s)
	}
	e.dev.onAsync(asyncPortErr, 0, 0, 1)
	e.dev.onAsync(asyncPortErr, 0, 0, 2) // another port: counted as other
	got := map[string]uint64{}
	e.dev.async.visit(func(n string, v uint64) { got[n] = v })
	if got["async_cq_err"] != 1 || got["async_qp_fatal"] != 1 || got["async_port_err"] != 1 || got["async_other"] != 1 || got["port_down"] != 1 {
		t.Errorf("counters %v", got)
	}
	e.dev.onAsync(asyncPortActive, 0, 0, 1)
	e.dev.async.visit(func(n string, v uint64) { got[n] = v })
	if got["port_down"] != 0 {
		t.Errorf("port_down %d after PORT_ACTIVE", got["port_down"])
	}
}

// TestFakeTwoCrossingsPerBatch: one batch of a server's loop (poll a CQ
// that holds both the receives and the sends, answer every request and
// repost its receive) crosses into C twice: one Poll, one PostBatch that
// posts the receive chain and the send chain. provider_crossings counts
// it; the driver gets both chains whole.
func TestFakeTwoCrossingsPerBatch(t *testing.T) {
	e := newFakeEnv(verbs.UD, fakeCaps)
	const n = 4
	recvs := make([]verbs.RecvWR, n)
	sends := make([]verbs.SendWR, n)
	ah := e.fakeAH()
	for i := range recvs {
		recvs[i] = verbs.RecvWR{ID: uint64(i), SG: []verbs.SGE{{Addr: e.mr.Addr() + uint64(i*64), Length: 64, LKey: e.mr.LKey()}}}
	}
	if _, err := e.qp.PostRecv(recvs); err != nil {
		t.Fatal(err)
	}
	for i := range recvs {
		fakePushWC(fakeCompletion{ID: uint64(i), Status: fakeWCSuccess, Opcode: fakeWCRecv, Len: 40,
			QPN: uint32(e.qp.QPN()), SrcQP: 9, Flags: fakeWCGRH | fakeWCWithImm, Imm: uint32(i)})
	}
	fakeClearLog()
	before := e.dev.crossings.Load()
	wc := make([]verbs.WC, 16)
	got, err := e.cq.Poll(wc)
	if err != nil || got != n {
		t.Fatalf("Poll = %d, %v", got, err)
	}
	for i := range got {
		sends[i] = verbs.SendWR{ID: uint64(100 + i), Opcode: verbs.OpSendWithImm, Imm: wc[i].Imm + 1, AH: ah,
			RemoteQPN: wc[i].SrcQP, RemoteQKey: verbs.DefaultQKey}
	}
	nr, ns, err := verbs.PostBatch(e.qp, recvs[:got], e.qp, sends[:got])
	if err != nil || nr != n || ns != n {
		t.Fatalf("PostBatch = %d, %d, %v", nr, ns, err)
	}
	if c := e.dev.crossings.Load() - before; c != 2 {
		t.Errorf("%d provider crossings for one batch, want 2", c)
	}
	var counted uint64
	e.dev.VisitCounters(func(name string, v uint64) {
		if name == verbs.CounterProviderCrossings {
			counted = v
		}
	})
	if counted != e.dev.crossings.Load() {
		t.Errorf("provider_crossings counter %d, want %d", counted, e.dev.crossings.Load())
	}
	ids, _ := fakeRecvd()
	sent := fakeSent()
	if len(ids) != n || len(sent) != n || fakeCalls() != 2 {
		t.Fatalf("driver got %d receives and %d sends in %d driver calls, want %d, %d in 2", len(ids), len(sent), fakeCalls(), n, n)
	}
	for i, w := range sent {
		if w.ID != uint64(100+i) || binary.BigEndian.Uint32(w.ImmWire[:]) != uint32(i+1) || !w.HasNext == (i < n-1) {
			t.Errorf("send %d: %+v", i, w)
		}
	}
}

// TestFakeStrictSendQueue: with the fake accounting the send queue as
// hardware does, max_send_wr WRs may be outstanding; slots come back only
// when a polled completion covers them (a signaled WR frees the
// unsignaled ones before it), so a post into a full queue fails with
// ErrQueueFull until the caller polls.
func TestFakeStrictSendQueue(t *testing.T) {
	e := newFakeEnv(verbs.UD, fakeCaps)
	fakeStrict(fakeCaps.MaxSendWR, 64)
	ah := e.fakeAH()
	wr := func(id uint64, sig bool) verbs.SendWR {
		w := verbs.SendWR{ID: id, Opcode: verbs.OpSend, AH: ah, RemoteQPN: 1}
		if sig {
			w.Flags = verbs.Signaled
		}
		return w
	}
	chain := make([]verbs.SendWR, fakeCaps.MaxSendWR)
	for i := range chain {
		chain[i] = wr(uint64(i), i == len(chain)-1) // the last one signaled
	}
	if n, err := e.qp.PostSend(chain); n != len(chain) || err != nil {
		t.Fatalf("PostSend of a full queue = %d, %v", n, err)
	}
	if n, err := e.qp.PostSend([]verbs.SendWR{wr(100, true)}); n != 0 || !errors.Is(err, verbs.ErrQueueFull) {
		t.Fatalf("PostSend into a full queue = %d, %v; want ErrQueueFull", n, err)
	}
	fakeExecuteSends(len(chain))
	// Sent, but not polled: the slots are still taken.
	if _, err := e.qp.PostSend([]verbs.SendWR{wr(101, true)}); !errors.Is(err, verbs.ErrQueueFull) {
		t.Fatalf("PostSend before polling = %v; want ErrQueueFull", err)
	}
	wc := make([]verbs.WC, 16)
	n, err := e.cq.Poll(wc)
	if err != nil || n != 1 || wc[0].ID != uint64(len(chain)-1) || wc[0].Status != verbs.WCSuccess {
		t.Fatalf("Poll = %d, %v, %+v; want the signaled WR's completion", n, err, wc[0])
	}
	if n, err := e.qp.PostSend(chain); n != len(chain) || err != nil {
		t.Fatalf("PostSend after the polled completion = %d, %v; want the whole queue free", n, err)
	}
}

// TestFakeFlushOnErr: when the QP goes to ERR, every outstanding WR
// completes flushed, the unsignaled ones too, and every posted receive:
// a CQ must have room for all of them, and the IDs of unsignaled WRs show
// up in completions.
func TestFakeFlushOnErr(t *testing.T) {
	e := newFakeEnv(verbs.UD, fakeCaps)
	fakeStrict(fakeCaps.MaxSendWR, 64)
	ah := e.fakeAH()
	sends := []verbs.SendWR{{ID: 1, Opcode: verbs.OpSend, AH: ah, RemoteQPN: 1},
		{ID: 2, Opcode: verbs.OpSend, AH: ah, RemoteQPN: 1},
		{ID: 3, Opcode: verbs.OpSend, Flags: verbs.Signaled, AH: ah, RemoteQPN: 1}}
	if _, err := e.qp.PostSend(sends); err != nil {
		t.Fatal(err)
	}
	recvs := []verbs.RecvWR{{ID: 10, SG: []verbs.SGE{{Addr: e.mr.Addr(), Length: 64, LKey: e.mr.LKey()}}},
		{ID: 11, SG: []verbs.SGE{{Addr: e.mr.Addr() + 64, Length: 64, LKey: e.mr.LKey()}}}}
	if _, err := e.qp.PostRecv(recvs); err != nil {
		t.Fatal(err)
	}
	fakeSetErr()
	wc := make([]verbs.WC, 16)
	n, err := e.cq.Poll(wc)
	if err != nil || n != 5 {
		t.Fatalf("Poll after ERR = %d, %v; want 5 flushed completions", n, err)
	}
	ids := map[uint64]bool{}
	for _, w := range wc[:n] {
		if w.Status != verbs.WCWRFlushErr || w.Err() == nil {
			t.Errorf("completion %+v, want flushed", w)
		}
		ids[w.ID] = true
	}
	for _, id := range []uint64{1, 2, 3, 10, 11} {
		if !ids[id] {
			t.Errorf("no flushed completion for WR %d", id)
		}
	}
}

// TestFakeCQOverrun: more completions than the CQ holds overrun it; the
// fake raises IBV_EVENT_CQ_ERR, and after the provider hears of it Poll
// fails with ErrCQOverrun, as it does when the driver's poll fails.
func TestFakeCQOverrun(t *testing.T) {
	e := newFakeEnv(verbs.UD, fakeCaps)
	fakeStrict(fakeCaps.MaxSendWR, 2)
	ah := e.fakeAH()
	chain := make([]verbs.SendWR, 3)
	for i := range chain {
		chain[i] = verbs.SendWR{ID: uint64(i), Opcode: verbs.OpSend, Flags: verbs.Signaled, AH: ah, RemoteQPN: 1}
	}
	if _, err := e.qp.PostSend(chain); err != nil {
		t.Fatal(err)
	}
	fakeExecuteSends(3)
	if !fakeTakeCQErr() {
		t.Fatal("three completions in a two-entry CQ raised no CQ_ERR")
	}
	wc := make([]verbs.WC, 4)
	if _, err := e.cq.Poll(wc); !errors.Is(err, verbs.ErrCQOverrun) {
		t.Fatalf("Poll of an overrun CQ: %v, want ErrCQOverrun", err)
	}
	e.dev.onAsync(asyncCQErr, e.fakeCQAddr(), 0, 0)
	if !e.cq.broken.Load() {
		t.Error("CQ_ERR did not mark the CQ broken")
	}
}

// TestFakePostMany: a server batch that re-posts receives on two request
// QPs and answers through a response QP crosses into C once for all
// three chains (two ibv_post_recv, one ibv_post_send); with the poll of
// a shared CQ, a batch is two crossings whatever the number of QPs.
func TestFakePostMany(t *testing.T) {
	e := newFakeEnv(verbs.UD, fakeCaps)
	q2 := e.extraQP(verbs.UD, fakeCaps)
	resp := e.extraQP(verbs.UD, fakeCaps)
	sg := func(i int) []verbs.SGE {
		return []verbs.SGE{{Addr: e.mr.Addr() + uint64(i*64), Length: 64, LKey: e.mr.LKey()}}
	}
	chains := []verbs.RecvChain{
		{QP: e.qp, WRs: []verbs.RecvWR{{ID: 1, SG: sg(1)}, {ID: 2, SG: sg(2)}}},
		{QP: q2, WRs: []verbs.RecvWR{{ID: 3, SG: sg(3)}}},
	}
	ah := e.fakeAH()
	sends := []verbs.SendWR{{ID: 10, Opcode: verbs.OpSendWithImm, Imm: 7, AH: ah, RemoteQPN: 5, RemoteQKey: 1},
		{ID: 11, Opcode: verbs.OpSendWithImm, Imm: 8, AH: ah, RemoteQPN: 5, RemoteQKey: 1}}
	fakeClearLog()
	before := e.dev.crossings.Load()
	ns, err := verbs.PostMany(e.dev, chains, resp, sends)
	if err != nil || ns != 2 || chains[0].Posted != 2 || chains[1].Posted != 1 {
		t.Fatalf("PostMany = %d, %v; posted %d, %d", ns, err, chains[0].Posted, chains[1].Posted)
	}
	if c := e.dev.crossings.Load() - before; c != 1 {
		t.Errorf("%d crossings for three chains, want 1", c)
	}
	ids, _ := fakeRecvd()
	if len(ids) != 3 || ids[0] != 1 || ids[2] != 3 || len(fakeSent()) != 2 || fakeCalls() != 3 {
		t.Errorf("driver got receives %v, %d sends, in %d driver calls", ids, len(fakeSent()), fakeCalls())
	}
	// Each QP's receive ring knows its own GRH buffers.
	if e.qp.tail-e.qp.head != 2 || q2.tail-q2.head != 1 {
		t.Errorf("receive rings hold %d and %d, want 2 and 1", e.qp.tail-e.qp.head, q2.tail-q2.head)
	}
	// The same QP twice is refused before anything is posted.
	if _, err := verbs.PostMany(e.dev, []verbs.RecvChain{{QP: q2, WRs: chains[1].WRs}, {QP: q2, WRs: chains[1].WRs}}, nil, nil); !errors.Is(err, verbs.ErrInvalidArgument) {
		t.Errorf("two chains for one QP: %v, want ErrInvalidArgument", err)
	}
	// A refused receive chain stops there: nothing after it is posted.
	fakeClearLog()
	fakeFail(0, fakeErrnoNoMem)
	ns, err = verbs.PostMany(e.dev, chains, resp, sends)
	if !errors.Is(err, verbs.ErrQueueFull) || ns != 0 || chains[0].Posted != 0 || chains[1].Posted != 0 || len(fakeSent()) != 0 {
		t.Errorf("refused first chain: %d, %v, posted %d, %d, %d sends", ns, err, chains[0].Posted, chains[1].Posted, len(fakeSent()))
	}
}
