package soft

import (
	"context"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/seqd/seqd/verbs"
	"github.com/seqd/seqd/verbs/rocev2"
)

// TestBuildGSO table-tests how a doorbell's packets become sendmmsg
// messages: runs of equal-size, contiguous packets to one peer share a
// UDP GSO message (the last may be shorter), up to gsoMaxSegs segments.
func TestBuildGSO(t *testing.T) {
	p1, p2 := &peer{}, &peer{}
	type msg struct {
		bytes, seg int // seg 0: no UDP_SEGMENT control message
	}
	tests := []struct {
		name  string
		gso   bool
		peers []*peer
		sizes []int
		want  []msg
	}{
		{"one", true, []*peer{p1}, []int{28}, []msg{{28, 0}}},
		{"run", true, rep(p1, 3), []int{28, 28, 28}, []msg{{84, 28}}},
		{"short last", true, rep(p1, 3), []int{28, 28, 20}, []msg{{76, 28}}},
		{"short first", true, rep(p1, 2), []int{20, 28}, []msg{{20, 0}, {28, 0}}},
		{"short middle ends run", true, rep(p1, 3), []int{28, 20, 28}, []msg{{48, 28}, {28, 0}}},
		{"two peers", true, []*peer{p1, p1, p2, p2}, []int{28, 28, 28, 28}, []msg{{56, 28}, {56, 28}}},
		{"max segments", true, rep(p1, gsoMaxSegs+1), repInt(28, gsoMaxSegs+1), []msg{{28 * gsoMaxSegs, 28}, {28, 0}}},
		{"gso off", false, rep(p1, 2), []int{28, 28}, []msg{{28, 0}, {28, 0}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := &queue{gso: tt.gso, arena: make([]byte, 1<<16), hdrs: make([]unix.Mmsghdr, 128),
				iovs: make([]unix.Iovec, 128), ctrl: make([]byte, 128*cmsgSpace), hdrPkt: make([]int, 128)}
			for i, n := range tt.sizes {
				q.pkts = append(q.pkts, txPkt{pe: tt.peers[i], off: int32(q.used), n: int32(n)})
				q.used += n
			}
			q.build(0)
			if q.nhdr != len(tt.want) {
				t.Fatalf("%d messages, want %d", q.nhdr, len(tt.want))
			}
			for i, w := range tt.want {
				h := &q.hdrs[i].Hdr
				if got := int(q.iovs[i].Len); got != w.bytes {
					t.Errorf("message %d: %d bytes, want %d", i, got, w.bytes)
				}
				seg := 0
				if h.Controllen > 0 {
					cm := (*unix.Cmsghdr)(unsafe.Pointer(h.Control))
					if cm.Level != unix.SOL_UDP || cm.Type != unix.UDP_SEGMENT {
						t.Fatalf("message %d: control message %d/%d", i, cm.Level, cm.Type)
					}
					seg = int(*(*uint16)(unsafe.Pointer(&q.ctrl[i*cmsgSpace+unix.CmsgLen(0)])))
				}
				if seg != w.seg {
					t.Errorf("message %d: segment size %d, want %d", i, seg, w.seg)
				}
			}
		})
	}
}

func rep(p *peer, n int) []*peer {
	s := make([]*peer, n)
	for i := range s {
		s[i] = p
	}
	return s
}

func repInt(v, n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = v
	}
	return s
}

// TestGSOFallback: when the kernel refuses a GSO message with EIO, the
// queue counts it, stops using GSO, and the same packets still arrive,
// one datagram each.
func TestGSOFallback(t *testing.T) {
	real := sendmmsg
	refused := 0
	sendmmsg = func(fd uintptr, hdrs []unix.Mmsghdr) (int, unix.Errno) {
		if hdrs[0].Hdr.Controllen > 0 {
			refused++
			return 0, unix.EIO
		}
		return real(fd, hdrs)
	}
	// Restored after the devices below are closed (cleanups run last
	// first), so their progress goroutines never see the swap.
	t.Cleanup(func() { sendmmsg = real })

	p := newUDPair(t, 16)
	a, b, ah, rwr, sg := p.a, p.b, p.ah, p.rwr, p.sg
	for round := 0; round < 2; round++ {
		wrs := make([]verbs.SendWR, 4)
		for i := range wrs {
			wrs[i] = verbs.SendWR{Opcode: verbs.OpSendWithImm, Imm: uint32(10*round + i), AH: ah,
				RemoteQPN: b.qp.QPN(), RemoteQKey: verbs.DefaultQKey}
		}
		if n, err := a.qp.PostSend(wrs); n != 4 || err != nil {
			t.Fatal(n, err)
		}
		wc := make([]verbs.WC, 16)
		got := 0
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		for got < 4 {
			n, err := b.cq.Poll(wc)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range wc[:n] {
				if want := uint32(10*round + got); c.Imm != want {
					t.Fatalf("round %d: immediate %d, want %d", round, c.Imm, want)
				}
				got++
			}
			b.postRecvs(t, rwr, sg, 0, n)
			if n == 0 {
				if err := b.cq.Wait(ctx); err != nil {
					t.Fatalf("round %d: %d of 4 arrived: %v", round, got, err)
				}
			}
		}
		cancel()
	}
	if refused != 1 {
		t.Errorf("GSO refused %d times, want once (then no more GSO)", refused)
	}
	var fallbacks uint64
	a.dev.(verbs.Counters).VisitCounters(func(n string, v uint64) {
		if n == "gso_fallback" {
			fallbacks = v
		}
	})
	if fallbacks != 1 {
		t.Errorf("gso_fallback = %d, want 1", fallbacks)
	}
}

// TestParseCmsgs reads GRO and IP_PKTINFO control messages in either
// order, and ignores truncated or unknown ones.
func TestParseCmsgs(t *testing.T) {
	gro := func(seg uint16) []byte {
		b := make([]byte, unix.CmsgSpace(4))
		cm := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
		cm.Level, cm.Type = unix.SOL_UDP, unix.UDP_GRO
		cm.SetLen(unix.CmsgLen(4))
		*(*uint16)(unsafe.Pointer(&b[unix.CmsgLen(0)])) = seg
		return b
	}
	pktinfo := func(a [4]byte) []byte {
		b := make([]byte, unix.CmsgSpace(unix.SizeofInet4Pktinfo))
		cm := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
		cm.Level, cm.Type = unix.IPPROTO_IP, unix.IP_PKTINFO
		cm.SetLen(unix.CmsgLen(unix.SizeofInet4Pktinfo))
		(*unix.Inet4Pktinfo)(unsafe.Pointer(&b[unix.CmsgLen(0)])).Addr = a
		return b
	}
	stampCm := func(ns int64) []byte {
		b := make([]byte, unix.CmsgSpace(sizeofTimespec))
		cm := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
		cm.Level, cm.Type = unix.SOL_SOCKET, unix.SCM_TIMESTAMPNS
		cm.SetLen(unix.CmsgLen(sizeofTimespec))
		*(*unix.Timespec)(unsafe.Pointer(&b[unix.CmsgLen(0)])) = unix.NsecToTimespec(ns)
		return b
	}
	const ns = 1_700_000_000_123_456_789
	ip := [4]byte{10, 1, 2, 3}
	cat := func(bs ...[]byte) (out []byte) {
		for _, b := range bs {
			out = append(out, b...)
		}
		return out
	}
	tests := []struct {
		name    string
		b       []byte
		gso     int
		haveDst bool
		stamp   int64
	}{
		{"none", nil, 0, false, 0},
		{"gro", gro(28), 28, false, 0},
		{"pktinfo", pktinfo(ip), 0, true, 0},
		{"both", cat(gro(28), pktinfo(ip)), 28, true, 0},
		{"both reversed", cat(pktinfo(ip), gro(40)), 40, true, 0},
		{"all three", cat(gro(28), pktinfo(ip), stampCm(ns)), 28, true, ns},
		{"timestamp first", cat(stampCm(ns), gro(40)), 40, false, ns},
		{"truncated", gro(28)[:10], 0, false, 0},
		{"truncated timestamp", stampCm(ns)[:unix.CmsgLen(0)+4], 0, false, 0},
		{"bad length", func() []byte { b := gro(28); b[0] = 200; return b }(), 0, false, 0},
	}
	if l := len(cat(gro(28), pktinfo(ip), stampCm(ns))); l > rxCtrlLen {
		t.Fatalf("the three control messages take %d bytes, rxCtrlLen is %d", l, rxCtrlLen)
	}
	for _, tt := range tests {
		gso, dst, have, stamp := parseCmsgs(tt.b)
		if gso != tt.gso || have != tt.haveDst || (have && dst != ip) || stamp != tt.stamp {
			t.Errorf("%s: gso %d dst %v %v stamp %d, want %d %v %d", tt.name, gso, dst, have, stamp, tt.gso, tt.haveDst, tt.stamp)
		}
	}
}

// TestArrival moves kernel receive stamps onto the monotonic clock: a
// stamp d before the burst's wall reading is d before its monotonic one;
// no stamp, or one ahead of the wall clock, is the burst's time.
func TestArrival(t *testing.T) {
	const mono, wall, empty = verbs.Time(5e9), int64(1_700_000_000e9), verbs.Time(4e9)
	tests := []struct {
		name  string
		stamp int64
		want  verbs.Time
	}{
		{"3ms old", wall - 3e6, mono - 3e6},
		{"same instant", wall, mono},
		{"wall clock stepped back", wall + 1e9, empty},
	}
	for _, tt := range tests {
		if got := arrival(mono, wall, tt.stamp, empty); got != tt.want {
			t.Errorf("%s: %d, want %d", tt.name, got, tt.want)
		}
	}
}

// TestReceiveStamped: a datagram read long after the socket was last
// seen empty (here: 20 ms, beyond staleEmpty) is stamped with when the
// kernel took it, so a request that waited in the socket buffer before a
// poller read it shows its full age, and no more.
func TestReceiveStamped(t *testing.T) {
	srv, cli, h := stampPair(t, 4)
	// Hold the receive lock so that neither a poller nor the progress
	// goroutine reads the datagram while it waits.
	q := srv.qp.(*qp).q
	q.rxMu.Lock()
	sent := verbs.Now()
	wr := []verbs.SendWR{{Opcode: verbs.OpSendWithImm, AH: h, RemoteQPN: srv.qp.QPN(), RemoteQKey: verbs.DefaultQKey, Imm: 7}}
	if n, err := cli.qp.PostSend(wr); n != 1 {
		q.rxMu.Unlock()
		t.Fatal(err)
	}
	const hold = 20 * time.Millisecond
	time.Sleep(hold)
	q.rxMu.Unlock()
	wc := make([]verbs.WC, 1)
	deadline := time.Now().Add(5 * time.Second)
	for {
		n, err := srv.cq.Poll(wc)
		if err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no completion")
		}
	}
	polled := verbs.Now()
	if wc[0].Status != verbs.WCSuccess || wc[0].Arrived == 0 {
		t.Fatalf("completion %+v", wc[0])
	}
	if wc[0].Arrived < sent || wc[0].Arrived > polled {
		t.Fatalf("stamped %v after the send, polled %v after it: outside the interval", wc[0].Arrived.Sub(sent), polled.Sub(sent))
	}
	if age := polled.Sub(wc[0].Arrived); age < hold {
		t.Fatalf("age at poll %v, but the datagram waited %v in the socket", age, hold)
	}
}

const sizeofTimespec = int(unsafe.Sizeof(unix.Timespec{}))

// TestBuildStampsIDs: in a GSO run, segment k leaves with IPv4 ID k (the
// kernel numbers the segments it cuts), so its ICRC is computed for ID
// k; rebuilt without GSO (the EIO fallback), every packet is a datagram
// of its own with ID 0 again. To a peer on the RoCEv2 port a run holds
// one destination QP's packets only.
func TestBuildStampsIDs(t *testing.T) {
	for _, port := range []uint16{5000, verbs.RoCEv2Port} {
		pe := &peer{flow: rocev2.Flow{Src: [4]byte{10, 0, 0, 1}, Dst: [4]byte{10, 0, 0, 2}, SrcPort: 7000, DstPort: port,
			FlagsFrag: 0x4000}, preLen: -1, roce: port == verbs.RoCEv2Port}
		q := &queue{gso: true, arena: make([]byte, 1<<16), hdrs: make([]unix.Mmsghdr, 128),
			iovs: make([]unix.Iovec, 128), ctrl: make([]byte, 128*cmsgSpace), hdrPkt: make([]int, 128)}
		dests := []uint32{0x100, 0x100, 0x100, 0x101, 0x101}
		for i, dst := range dests {
			b := q.arena[q.used : q.used+rocev2.UDImmLen]
			pe.udimm.Put(b, pe.prefix(rocev2.UDImmLen), dst, uint32(i), verbs.DefaultQKey, 9, uint32(i))
			q.pkts = append(q.pkts, txPkt{pe: pe, off: int32(q.used), n: rocev2.UDImmLen})
			q.used += rocev2.UDImmLen
		}
		check := func(what string, wantIDs []uint16) {
			t.Helper()
			for i, p := range q.pkts {
				f := pe.flow
				f.ID = wantIDs[i]
				if !rocev2.VerifyICRC(&f, q.arena[p.off:p.off+p.n]) {
					t.Errorf("port %d, %s: packet %d: ICRC not right for ID %d", port, what, i, wantIDs[i])
				}
			}
		}
		q.build(0)
		if port == verbs.RoCEv2Port {
			check("GSO", []uint16{0, 1, 2, 0, 1})
		} else {
			check("GSO", []uint16{0, 1, 2, 3, 4})
		}
		q.gso = false
		q.build(0)
		check("no GSO", []uint16{0, 0, 0, 0, 0})
	}
}

// TestReceiveStampedByEmptyRead: while pollers keep reading the socket
// (the last read that found it empty is recent: staleEmpty, here an
// hour), the kernel's receive times are off and a datagram is stamped
// with the start of the last read that found the socket empty, which it
// arrived after: its age is over-estimated, never under-estimated. A
// batch cut short counts as such a read once the next read shows that
// the kernel did not cut it on an error. The first read that finds the
// socket empty again turns the kernel's times off.
func TestReceiveStampedByEmptyRead(t *testing.T) {
	srv, cli, h := stampPair(t, 8)
	q := srv.qp.(*qp).q
	q.rxMu.Lock()
	q.stale = time.Hour
	q.rxMu.Unlock()
	send := func(n int) verbs.Time {
		t.Helper()
		wr := make([]verbs.SendWR, n)
		for i := range wr {
			wr[i] = verbs.SendWR{Opcode: verbs.OpSendWithImm, AH: h, RemoteQPN: srv.qp.QPN(), RemoteQKey: verbs.DefaultQKey, Imm: uint32(i)}
		}
		sent := verbs.Now()
		if k, err := cli.qp.PostSend(wr); k != n {
			t.Fatal(err)
		}
		// Wait until the socket is readable, without reading it.
		fds := []unix.PollFd{{Fd: int32(q.fd), Events: unix.POLLIN}}
		if k, err := unix.Poll(fds, 5000); k != 1 {
			t.Fatalf("socket not readable: %v", err)
		}
		return sent
	}
	// Hold the receive lock: only this test's bursts read the socket.
	q.rxMu.Lock()
	defer q.rxMu.Unlock()
	before := verbs.Now()
	if q.burst() || q.rxErrno != unix.EAGAIN {
		t.Fatalf("the socket is not empty (errno %v)", q.rxErrno)
	}
	empty := q.rxEmpty
	if empty < before || q.stamps {
		t.Fatalf("an empty read at %v (after %v), kernel stamps %v: want it recorded and the stamps off", empty, before, q.stamps)
	}

	// Three datagrams: a batch cut short. They are stamped with the
	// empty read, which was before they were sent.
	sent := send(3)
	const hold = 20 * time.Millisecond
	time.Sleep(hold)
	q.burst()
	q.flushPend()
	short := q.rxShort
	if short <= empty || q.rxEmpty != empty {
		t.Fatalf("after a short batch: rxShort %v, rxEmpty %v (was %v)", short, q.rxEmpty, empty)
	}
	wc := make([]verbs.WC, 8)
	n := srv.cq.(*cq).take(wc)
	if n != 3 {
		t.Fatalf("%d completions, want 3", n)
	}
	for _, w := range wc[:n] {
		if w.Status != verbs.WCSuccess || w.Arrived != empty {
			t.Fatalf("completion %+v: want stamped %v, the empty read", w, empty)
		}
		if w.Arrived > sent || verbs.Now().Sub(w.Arrived) < hold {
			t.Fatalf("stamped %v after the send: the age is under-estimated", w.Arrived.Sub(sent))
		}
	}

	// The next read succeeds, so the short batch ran the socket dry:
	// its start stamps the next datagram.
	send(1)
	q.burst()
	q.flushPend()
	if q.rxEmpty != short {
		t.Fatalf("rxEmpty %v, want the short batch's start %v", q.rxEmpty, short)
	}
	if n := srv.cq.(*cq).take(wc); n != 1 || wc[0].Arrived != short {
		t.Fatalf("%d completions, stamped %v: want 1, stamped %v", n, wc[0].Arrived, short)
	}
}

// TestStampsOnWhenStale: a burst that finds the last empty read older
// than staleEmpty turns the kernel's receive times on before it reads,
// and the next read that finds the socket empty turns them off again; a
// datagram that arrived while they were off is read with its true
// arrival time.
func TestStampsOnWhenStale(t *testing.T) {
	srv, cli, h := stampPair(t, 1)
	q := srv.qp.(*qp).q
	q.rxMu.Lock()
	defer q.rxMu.Unlock()
	q.stale = time.Hour
	q.burst()
	if q.rxErrno != unix.EAGAIN || q.stamps {
		t.Fatalf("errno %v, stamps %v: want an empty socket and the stamps off", q.rxErrno, q.stamps)
	}
	sent := verbs.Now()
	wr := []verbs.SendWR{{Opcode: verbs.OpSendWithImm, AH: h, RemoteQPN: srv.qp.QPN(), RemoteQKey: verbs.DefaultQKey, Imm: 1}}
	if k, err := cli.qp.PostSend(wr); k != 1 {
		t.Fatal(err)
	}
	fds := []unix.PollFd{{Fd: int32(q.fd), Events: unix.POLLIN}}
	if k, err := unix.Poll(fds, 5000); k != 1 {
		t.Fatalf("socket not readable: %v", err)
	}
	const hold = 20 * time.Millisecond
	time.Sleep(hold)
	q.stale = time.Millisecond // the empty read is now stale
	empty := q.rxEmpty
	q.burst()
	q.flushPend()
	if !q.stamps {
		t.Fatal("stale: the kernel's receive times were not turned on")
	}
	wc := make([]verbs.WC, 1)
	if n := srv.cq.(*cq).take(wc); n != 1 {
		t.Fatalf("%d completions", n)
	}
	if wc[0].Arrived == empty || wc[0].Arrived < sent || verbs.Now().Sub(wc[0].Arrived) < hold {
		t.Fatalf("stamped %v after the send (the empty read %v): want the kernel's time, at least %v old", wc[0].Arrived.Sub(sent), empty.Sub(sent), hold)
	}
	q.burst()
	if q.rxErrno != unix.EAGAIN || q.stamps {
		t.Fatalf("errno %v, stamps %v: want the empty read to turn them off", q.rxErrno, q.stamps)
	}
}

// stampPair opens a UD server end with n receives posted, a client end
// that can send it n requests, and the client's AH for the server.
func stampPair(t *testing.T, n int) (srv, cli *udEnd, h verbs.AH) {
	t.Helper()
	srv = newUDEnd(t, nil, n)
	cli = newUDEnd(t, nil, n)
	srv.postRecvs(t, make([]verbs.RecvWR, n), make([]verbs.SGE, n), 0, n)
	h, err := cli.pd.CreateAH(verbs.AHAttr{Dest: srv.qp.Address()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return srv, cli, h
}
