package soft

import (
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/seqd/seqd/verbs"
)

// The echo benchmarks measure header-only UD SEND_WITH_IMM request/response
// round trips through the provider, next to the same exchange over raw
// UDP sockets with GSO and GRO (28-byte datagrams: the size of a
// header-only RoCEv2 SEND_WITH_IMM), measured in the same run. Client and
// server busy-poll on their own goroutines (one per core on a 2-core
// machine). b.N counts round trips; Mops is millions of round trips per
// second. The ping-pong benchmarks keep one request in flight; rtt_us is
// the round-trip time.

const (
	echoBatch  = 64
	echoWindow = 4 * echoBatch
)

// udEcho is a soft-provider echo pair.
type udEcho struct {
	cli, srv     *udEnd
	cliAH, srvAH verbs.AH
}

func newUDEcho(b *testing.B) *udEcho {
	e := &udEcho{cli: newUDEnd(b, nil, 2*echoWindow), srv: newUDEnd(b, nil, 2*echoWindow)}
	var err error
	if e.cliAH, err = e.cli.pd.CreateAH(verbs.AHAttr{Dest: e.srv.qp.Address()}); err != nil {
		b.Fatal(err)
	}
	if e.srvAH, err = e.srv.pd.CreateAH(verbs.AHAttr{Dest: e.cli.qp.Address()}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { e.cliAH.Close(); e.srvAH.Close() })
	return e
}

// echoer is one side's preallocated work requests.
type echoer struct {
	e    *udEnd
	ah   verbs.AH
	dst  verbs.QPN
	wc   []verbs.WC
	swr  []verbs.SendWR
	rwr  []verbs.RecvWR
	sges []verbs.SGE
	next int // next receive slot to post
}

func newEchoer(b *testing.B, e *udEnd, ah verbs.AH, dst verbs.QPN) *echoer {
	x := &echoer{e: e, ah: ah, dst: dst, wc: make([]verbs.WC, 2*echoWindow),
		swr: make([]verbs.SendWR, 2*echoWindow), rwr: make([]verbs.RecvWR, 2*echoWindow), sges: make([]verbs.SGE, 2*echoWindow)}
	for i := range x.swr {
		x.swr[i] = verbs.SendWR{Opcode: verbs.OpSendWithImm, AH: ah, RemoteQPN: dst, RemoteQKey: verbs.DefaultQKey}
	}
	e.postRecvs(b, x.rwr, x.sges, 0, 2*echoWindow)
	return x
}

func (x *echoer) send(b testing.TB, n int, imm uint32) {
	for i := 0; i < n; i++ {
		x.swr[i].Imm = imm + uint32(i)
	}
	if k, err := x.e.qp.PostSend(x.swr[:n]); k != n || err != nil {
		b.Fatalf("post %d: %d %v", n, k, err)
	}
}

// poll returns the number of receive completions, re-posting their RECVs.
func (x *echoer) poll(b testing.TB) int {
	n, err := x.e.cq.Poll(x.wc)
	if err != nil {
		b.Fatal(err)
	}
	k := 0
	for i := 0; i < n; i++ {
		if x.wc[i].Status != verbs.WCSuccess {
			b.Fatalf("completion %+v", x.wc[i])
		}
		if x.wc[i].Opcode == verbs.WCRecv {
			k++
		}
	}
	if k > 0 {
		x.e.postRecvs(b, x.rwr, x.sges, x.next, k)
		x.next = (x.next + k) % len(x.sges)
	}
	return k
}

func BenchmarkEchoSoft(b *testing.B) {
	e := newUDEcho(b)
	cli := newEchoer(b, e.cli, e.cliAH, e.srv.qp.QPN())
	srv := newEchoer(b, e.srv, e.srvAH, e.cli.qp.QPN())
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		runtime.LockOSThread()
		for !stop.Load() {
			if k := srv.poll(b); k > 0 {
				srv.send(b, k, 0)
			}
		}
	}()
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	runEchoClient(b, cli.send, cli.poll)
	el := time.Since(start)
	b.StopTimer()
	stop.Store(true)
	wg.Wait()
	b.ReportMetric(float64(b.N)/el.Seconds()/1e6, "Mops")
	if testing.Verbose() {
		for _, d := range []verbs.Device{e.cli.dev, e.srv.dev} {
			d.(verbs.Counters).VisitCounters(func(n string, v uint64) {
				if v != 0 {
					b.Logf("%s %s=%d", d.Name(), n, v)
				}
			})
		}
	}
}

// runEchoClient keeps echoWindow requests in flight until b.N have been
// answered.
func runEchoClient(b *testing.B, send func(testing.TB, int, uint32), poll func(testing.TB) int) {
	sent, done := 0, 0
	for sent < b.N && sent-done+echoBatch <= echoWindow {
		n := min(echoBatch, b.N-sent)
		send(b, n, uint32(sent))
		sent += n
	}
	deadline := time.Now().Add(time.Minute)
	idle := 0
	for done < b.N {
		k := poll(b)
		done += k
		if k == 0 {
			if idle++; idle&0xffff == 0 && time.Now().After(deadline) {
				b.Fatalf("echo stalled: %d of %d answered", done, b.N)
			}
			continue
		}
		for sent < b.N && sent-done+echoBatch <= echoWindow {
			n := min(echoBatch, b.N-sent)
			send(b, n, uint32(sent))
			sent += n
		}
	}
}

func BenchmarkPingPongSoft(b *testing.B) {
	e := newUDEcho(b)
	cli := newEchoer(b, e.cli, e.cliAH, e.srv.qp.QPN())
	srv := newEchoer(b, e.srv, e.srvAH, e.cli.qp.QPN())
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		runtime.LockOSThread()
		for !stop.Load() {
			if k := srv.poll(b); k > 0 {
				srv.send(b, k, 0)
			}
		}
	}()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		cli.send(b, 1, uint32(i))
		for cli.poll(b) == 0 {
		}
	}
	el := time.Since(start)
	b.StopTimer()
	stop.Store(true)
	wg.Wait()
	b.ReportMetric(float64(el.Microseconds())/float64(b.N), "rtt_us")
}

// ---- the raw UDP reference ----

// rawEnd is a UDP socket with GRO on, batch receive and GSO send buffers.
type rawEnd struct {
	conn  *net.UDPConn
	fd    int
	peer  unix.RawSockaddrInet4
	out   []byte
	ctrl  []byte
	bufs  [8][]byte
	hdrs  [8]unix.Mmsghdr
	iovs  [8]unix.Iovec
	rctrl [8][cmsgSpace]byte
}

func newRawEnd(b *testing.B) *rawEnd {
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	r := &rawEnd{conn: c, out: make([]byte, 28*echoBatch), ctrl: make([]byte, cmsgSpace)}
	rc, _ := c.SyscallConn()
	rc.Control(func(fd uintptr) {
		r.fd = int(fd)
		unix.SetsockoptInt(r.fd, unix.IPPROTO_UDP, unix.UDP_GRO, 1)
		unix.SetsockoptInt(r.fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 4<<20)
	})
	for i := range r.bufs {
		r.bufs[i] = make([]byte, rxBufLen)
		r.iovs[i] = unix.Iovec{Base: &r.bufs[i][0]}
		r.iovs[i].SetLen(rxBufLen)
		r.hdrs[i].Hdr.Iov = &r.iovs[i]
		r.hdrs[i].Hdr.SetIovlen(1)
		r.hdrs[i].Hdr.Control = &r.rctrl[i][0]
	}
	cm := (*unix.Cmsghdr)(unsafe.Pointer(&r.ctrl[0]))
	cm.Level, cm.Type = unix.SOL_UDP, unix.UDP_SEGMENT
	cm.SetLen(unix.CmsgLen(2))
	*(*uint16)(unsafe.Pointer(&r.ctrl[unix.CmsgLen(0)])) = 28
	return r
}

func (r *rawEnd) connect(o *rawEnd) {
	a := o.conn.LocalAddr().(*net.UDPAddr)
	r.peer = unix.RawSockaddrInet4{Family: unix.AF_INET, Port: htons(uint16(a.Port)), Addr: [4]byte{127, 0, 0, 1}}
}

// send sends n 28-byte datagrams as one GSO message.
func (r *rawEnd) send(b testing.TB, n int, _ uint32) {
	iov := unix.Iovec{Base: &r.out[0]}
	iov.SetLen(28 * n)
	h := unix.Msghdr{Name: (*byte)(unsafe.Pointer(&r.peer)), Namelen: unix.SizeofSockaddrInet4, Iov: &iov}
	h.SetIovlen(1)
	if n > 1 {
		h.Control = &r.ctrl[0]
		h.SetControllen(unix.CmsgSpace(2))
	}
	for {
		_, _, errno := unix.Syscall(unix.SYS_SENDMSG, uintptr(r.fd), uintptr(unsafe.Pointer(&h)), 0)
		if errno == 0 {
			return
		}
		if errno != unix.EAGAIN && errno != unix.EINTR {
			b.Fatal(errno)
		}
	}
}

// poll receives without blocking and returns the number of datagrams.
func (r *rawEnd) poll(b testing.TB) int {
	for i := range r.hdrs {
		r.hdrs[i].Hdr.SetControllen(cmsgSpace)
	}
	n, _, errno := unix.Syscall6(unix.SYS_RECVMMSG, uintptr(r.fd), uintptr(unsafe.Pointer(&r.hdrs[0])), 8, unix.MSG_DONTWAIT, 0, 0)
	if errno != 0 {
		return 0
	}
	k := 0
	for i := 0; i < int(n); i++ {
		total := int(r.hdrs[i].Len)
		seg := total
		if r.hdrs[i].Hdr.Controllen > 0 {
			if s := int(*(*uint16)(unsafe.Pointer(&r.rctrl[i][unix.CmsgLen(0)]))); s > 0 {
				seg = s
			}
		}
		k += (total + seg - 1) / seg
	}
	return k
}

func BenchmarkEchoRaw(b *testing.B) {
	cli, srv := newRawEnd(b), newRawEnd(b)
	cli.connect(srv)
	srv.connect(cli)
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		runtime.LockOSThread()
		for !stop.Load() {
			for k := srv.poll(b); k > 0; {
				n := min(k, echoBatch)
				srv.send(b, n, 0)
				k -= n
			}
		}
	}()
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	runEchoClient(b, cli.send, cli.poll)
	el := time.Since(start)
	b.StopTimer()
	stop.Store(true)
	wg.Wait()
	b.ReportMetric(float64(b.N)/el.Seconds()/1e6, "Mops")
}

func BenchmarkPingPongRaw(b *testing.B) {
	cli, srv := newRawEnd(b), newRawEnd(b)
	cli.connect(srv)
	srv.connect(cli)
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		runtime.LockOSThread()
		for !stop.Load() {
			if k := srv.poll(b); k > 0 {
				srv.send(b, k, 0)
			}
		}
	}()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		cli.send(b, 1, 0)
		for cli.poll(b) == 0 {
		}
	}
	el := time.Since(start)
	b.StopTimer()
	stop.Store(true)
	wg.Wait()
	b.ReportMetric(float64(el.Microseconds())/float64(b.N), "rtt_us")
}
