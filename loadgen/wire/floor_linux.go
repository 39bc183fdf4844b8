package wire

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/seqd/seqd/verbs"
)

// The floors: servers that do no work, driven by the same generator on
// the server's core, so that seqd's figure is a ratio to what the
// transport alone allows there.

// floorSpin is how long an idle floor server busy-polls before it
// blocks, as seqd's worker does (headeronly.Config.Spin).
const floorSpin = time.Millisecond

// EchoServer is a floor server running on a thread of its own.
type EchoServer struct {
	kind   Kind
	addr   netip.AddrPort
	qpn    uint32
	qkey   uint32
	tid    atomic.Int32
	stop   atomic.Bool
	cancel context.CancelFunc
	done   chan error
	closeF func()
}

// TID is the thread the server runs on (its CPU time is that thread's).
func (e *EchoServer) TID() int { return int(e.tid.Load()) }

// Target is the generator's target for flows flows of window window.
func (e *EchoServer) Target(flows, window int) Target {
	return EchoTarget(e.kind, e.addr, e.qpn, e.qkey, flows, window)
}

// String names the server as EchoTarget takes it: kind, address, QPN
// and Q_Key.
func (e *EchoServer) String() string {
	return fmt.Sprintf("%v %v %d %d", e.kind, e.addr, e.qpn, e.qkey)
}

// EchoTarget is the target of an echo server of kind at addr (for the
// provider's, its QP and Q_Key).
func EchoTarget(kind Kind, addr netip.AddrPort, qpn, qkey uint32, flows, window int) Target {
	t := Target{Kind: kind, Flows: make([]FlowTarget, flows)}
	for i := range t.Flows {
		t.Flows[i] = FlowTarget{Server: addr, QPN: qpn, QKey: qkey, Window: window}
	}
	if kind == ProviderEcho {
		t.AnswerQKey, t.AnswerQPNs = qkey, []uint32{qpn}
	}
	return t
}

// ParseKind parses a Kind's String.
func ParseKind(s string) (Kind, error) {
	for _, k := range []Kind{Seqd, ProviderEcho, RawEcho} {
		if k.String() == s {
			return k, nil
		}
	}
	return 0, fmt.Errorf("%w: server kind %q", ErrConfig, s)
}

// Close stops the server and waits for its thread.
func (e *EchoServer) Close() error {
	e.stop.Store(true)
	e.cancel()
	err := <-e.done
	if e.closeF != nil {
		e.closeF()
	}
	return err
}

// pinThread locks the calling goroutine to its thread and, for core >= 0,
// the thread to core.
func pinThread(core int) error {
	runtime.LockOSThread()
	if core < 0 {
		return nil
	}
	var set unix.CPUSet
	set.Set(core)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return fmt.Errorf("wire: pin to core %d: %w", core, err)
	}
	return nil
}

func (e *EchoServer) start(core int, loop func(ctx context.Context) error) error {
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel, e.done = cancel, make(chan error, 1)
	started := make(chan error, 1)
	go func() {
		defer runtime.UnlockOSThread()
		if err := pinThread(core); err != nil {
			started <- err
			e.done <- err
			return
		}
		e.tid.Store(int32(unix.Gettid()))
		started <- nil
		e.done <- loop(ctx)
	}()
	if err := <-started; err != nil {
		cancel()
		return err
	}
	return nil
}

// StartProviderEcho starts the provider's header-only echo server: a UD
// QP of the soft provider on a loopback device that answers each
// header-only SEND_WITH_IMM with one carrying the same immediate, to its
// sender, through the provider's send path (one chain per poll). It
// busy-polls on a thread pinned to core (-1: unpinned), and blocks on its
// CQ after floorSpin idle, as seqd's worker does. depth is the number of
// receives posted: at least the requests the generator keeps in flight.
func StartProviderEcho(core, depth int, opts verbs.Options) (*EchoServer, error) {
	dev, err := verbs.Open("soft", "127.0.0.1:0", opts)
	if err != nil {
		return nil, fmt.Errorf("wire: provider echo: %w", err)
	}
	var closers []interface{ Close() error }
	fail := func(err error) (*EchoServer, error) {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i].Close()
		}
		dev.Close()
		return nil, fmt.Errorf("wire: provider echo: %w", err)
	}
	pd, err := dev.AllocPD()
	if err != nil {
		return fail(err)
	}
	closers = append(closers, pd)
	const batch = 256
	cq, err := dev.CreateCQ(2 * depth)
	if err != nil {
		return fail(err)
	}
	closers = append(closers, cq)
	scq, err := dev.CreateCQ(64)
	if err != nil {
		return fail(err)
	}
	closers = append(closers, scq)
	qp, err := pd.CreateQP(verbs.QPInitAttr{Type: verbs.UD, SendCQ: scq, RecvCQ: cq,
		Cap: verbs.QPCap{MaxSendWR: 4 * batch, MaxRecvWR: depth, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		return fail(err)
	}
	closers = append(closers, qp)
	const qkey = verbs.DefaultQKey
	if err := verbs.BringUpUD(qp, qkey, 0); err != nil {
		return fail(err)
	}
	const slotLen = verbs.GRHLen + 64
	mr, err := pd.RegMR(depth*slotLen, verbs.AccessLocalWrite)
	if err != nil {
		return fail(err)
	}
	closers = append(closers, mr)
	sges := make([]verbs.SGE, depth)
	rwrs := make([]verbs.RecvWR, depth)
	for i := range rwrs {
		sges[i] = verbs.SGE{Addr: mr.Addr() + uint64(i*slotLen), Length: slotLen, LKey: mr.LKey()}
		rwrs[i] = verbs.RecvWR{ID: uint64(i), SG: sges[i : i+1]}
	}
	if _, err := qp.PostRecv(rwrs); err != nil {
		return fail(err)
	}
	a := qp.Address()
	e := &EchoServer{kind: ProviderEcho, addr: netip.AddrPortFrom(a.GID.Addr(), a.RoCEPort()), qpn: uint32(qp.QPN()), qkey: qkey}
	ahs := map[verbs.Address]verbs.AH{}
	e.closeF = func() {
		for _, ah := range ahs {
			ah.Close()
		}
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i].Close()
		}
		dev.Close()
	}
	wcs := make([]verbs.WC, batch)
	swrs := make([]verbs.SendWR, batch)
	repost := make([]verbs.RecvWR, batch)
	loop := func(ctx context.Context) error {
		var lastSrc verbs.Address
		var lastAH verbs.AH
		idle := time.Time{}
		for !e.stop.Load() {
			n, err := cq.Poll(wcs)
			if err != nil {
				return err
			}
			if n == 0 {
				now := time.Now()
				if idle.IsZero() {
					idle = now
				} else if now.Sub(idle) > floorSpin {
					if err := cq.Wait(ctx); err != nil && ctx.Err() == nil {
						return err
					}
					idle = time.Time{}
				}
				continue
			}
			idle = time.Time{}
			k := 0
			for i := range wcs[:n] {
				wc := &wcs[i]
				repost[i] = rwrs[wc.ID]
				if wc.Status != verbs.WCSuccess || wc.Opcode != verbs.WCRecv {
					continue
				}
				if lastAH == nil || wc.Src != lastSrc {
					ah, ok := ahs[wc.Src]
					if !ok {
						if ah, err = pd.CreateAH(verbs.AHAttr{Dest: wc.Src, PortNum: 1}); err != nil {
							return err
						}
						ahs[wc.Src] = ah
					}
					lastSrc, lastAH = wc.Src, ah
				}
				swrs[k] = verbs.SendWR{Opcode: verbs.OpSendWithImm, AH: lastAH, RemoteQPN: wc.SrcQP, RemoteQKey: qkey, Imm: wc.Imm}
				k++
			}
			if k > 0 {
				if _, err := qp.PostSend(swrs[:k]); err != nil {
					return err
				}
			}
			if _, err := qp.PostRecv(repost[:n]); err != nil {
				return err
			}
		}
		return nil
	}
	if err := e.start(core, loop); err != nil {
		e.closeF()
		return nil, err
	}
	return e, nil
}

// StartRawEcho starts the raw UDP echo: a loopback UDP socket with GRO
// that sends every datagram back to its sender as it came (one GSO
// message per received super-packet, all in one sendmmsg), on a thread
// pinned to core. Its answers are the generator's requests.
func StartRawEcho(core int) (*EchoServer, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("wire: raw echo: %w", err)
	}
	err = errors.Join(
		unix.SetsockoptInt(fd, unix.IPPROTO_UDP, unix.UDP_GRO, 1),
		unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}),
	)
	for _, o := range [][2]int{{unix.SO_RCVBUFFORCE, unix.SO_RCVBUF}, {unix.SO_SNDBUFFORCE, unix.SO_SNDBUF}} {
		if unix.SetsockoptInt(fd, unix.SOL_SOCKET, o[0], sockBuf) != nil {
			unix.SetsockoptInt(fd, unix.SOL_SOCKET, o[1], sockBuf)
		}
	}
	var sa unix.Sockaddr
	if err == nil {
		sa, err = unix.Getsockname(fd)
	}
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("wire: raw echo: %w", err)
	}
	port := uint16(sa.(*unix.SockaddrInet4).Port)
	e := &EchoServer{kind: RawEcho, addr: netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), port)}
	e.closeF = func() { unix.Close(fd) }
	bufs := make([][]byte, rxMsgs)
	rh := make([]unix.Mmsghdr, rxMsgs)
	sh := make([]unix.Mmsghdr, rxMsgs)
	iovs := make([]unix.Iovec, rxMsgs)
	siovs := make([]unix.Iovec, rxMsgs)
	names := make([]unix.RawSockaddrInet4, rxMsgs)
	rctrl := make([]byte, rxMsgs*rxCtrlLen)
	sctrl := make([]byte, rxMsgs*segLen)
	for i := range bufs {
		bufs[i] = make([]byte, rxBufLen)
		iovs[i] = unix.Iovec{Base: &bufs[i][0]}
		iovs[i].SetLen(rxBufLen)
		h := &rh[i].Hdr
		h.Iov = &iovs[i]
		h.SetIovlen(1)
		h.Name = (*byte)(unsafe.Pointer(&names[i]))
		h.Control = &rctrl[i*rxCtrlLen]
		cm := (*unix.Cmsghdr)(unsafe.Pointer(&sctrl[i*segLen]))
		cm.Level, cm.Type = unix.SOL_UDP, unix.UDP_SEGMENT
		cm.SetLen(unix.CmsgLen(2))
	}
	loop := func(ctx context.Context) error {
		idle := time.Time{}
		for !e.stop.Load() {
			for i := range rh {
				h := &rh[i].Hdr
				h.Namelen = unix.SizeofSockaddrInet4
				h.SetControllen(rxCtrlLen)
				h.Flags = 0
			}
			n, _, errno := unix.RawSyscall6(unix.SYS_RECVMMSG, uintptr(fd), uintptr(unsafe.Pointer(&rh[0])), rxMsgs, unix.MSG_DONTWAIT, 0, 0)
			if errno != 0 || n == 0 {
				now := time.Now()
				if idle.IsZero() {
					idle = now
				} else if now.Sub(idle) > floorSpin {
					pfd := [1]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
					unix.Poll(pfd[:], 10)
					idle = time.Time{}
				}
				continue
			}
			idle = time.Time{}
			for i := range int(n) {
				total := int(rh[i].Len)
				seg := groSize(rctrl[i*rxCtrlLen : i*rxCtrlLen+min(int(rh[i].Hdr.Controllen), rxCtrlLen)])
				siovs[i] = unix.Iovec{Base: &bufs[i][0]}
				siovs[i].SetLen(total)
				h := &sh[i].Hdr
				*h = unix.Msghdr{Name: (*byte)(unsafe.Pointer(&names[i])), Namelen: unix.SizeofSockaddrInet4, Iov: &siovs[i]}
				h.SetIovlen(1)
				if seg > 0 && seg < total {
					*(*uint16)(unsafe.Pointer(&sctrl[i*segLen+unix.CmsgLen(0)])) = uint16(seg)
					h.Control = &sctrl[i*segLen]
					h.SetControllen(segLen)
				}
			}
			for sent := 0; sent < int(n); {
				k, _, errno := unix.RawSyscall6(unix.SYS_SENDMMSG, uintptr(fd), uintptr(unsafe.Pointer(&sh[sent])), n-uintptr(sent), 0, 0, 0)
				switch errno {
				case 0:
					sent += int(k)
				case unix.EAGAIN, unix.ENOBUFS, unix.EINTR:
					pfd := [1]unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
					unix.Poll(pfd[:], 1)
				default:
					sent++ // lost, as on a network
				}
			}
		}
		return nil
	}
	if err := e.start(core, loop); err != nil {
		e.closeF()
		return nil, err
	}
	return e, nil
}
