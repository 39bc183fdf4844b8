package echo

import (
	"fmt"
	"net"
	"unsafe"

	"golang.org/x/sys/unix"
)

const (
	rawMsgLen   = 28       // a header-only RoCEv2 SEND_WITH_IMM's UDP payload
	rawRxBufLen = 64 << 10 // one GRO super-packet
	rawRxMsgs   = 8
	cmsgSpace   = 24 // CMSG_SPACE(sizeof(int)) on 64-bit Linux
)

// rawEnd is a UDP socket with GRO on, batch receive (recvmmsg) and GSO
// send: the kernel's own floor for the provider's packets.
type rawEnd struct {
	conn  *net.UDPConn
	fd    int
	peer  unix.RawSockaddrInet4
	out   []byte
	ctrl  []byte
	bufs  [rawRxMsgs][]byte
	hdrs  [rawRxMsgs]unix.Mmsghdr
	iovs  [rawRxMsgs]unix.Iovec
	rctrl [rawRxMsgs][cmsgSpace]byte
}

func newRawEnd() (*rawEnd, error) {
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return nil, fmt.Errorf("%w: raw UDP: %v", ErrEcho, err)
	}
	r := &rawEnd{conn: c, out: make([]byte, rawMsgLen*Batch), ctrl: make([]byte, cmsgSpace)}
	rc, err := c.SyscallConn()
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("%w: raw UDP: %v", ErrEcho, err)
	}
	var serr error
	rc.Control(func(fd uintptr) {
		r.fd = int(fd)
		serr = unix.SetsockoptInt(r.fd, unix.IPPROTO_UDP, unix.UDP_GRO, 1)
		unix.SetsockoptInt(r.fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 4<<20)
	})
	if serr != nil {
		c.Close()
		return nil, fmt.Errorf("%w: UDP_GRO: %v", ErrEcho, serr)
	}
	for i := range r.bufs {
		r.bufs[i] = make([]byte, rawRxBufLen)
		r.iovs[i] = unix.Iovec{Base: &r.bufs[i][0]}
		r.iovs[i].SetLen(rawRxBufLen)
		r.hdrs[i].Hdr.Iov = &r.iovs[i]
		r.hdrs[i].Hdr.SetIovlen(1)
		r.hdrs[i].Hdr.Control = &r.rctrl[i][0]
	}
	cm := (*unix.Cmsghdr)(unsafe.Pointer(&r.ctrl[0]))
	cm.Level, cm.Type = unix.SOL_UDP, unix.UDP_SEGMENT
	cm.SetLen(unix.CmsgLen(2))
	*(*uint16)(unsafe.Pointer(&r.ctrl[unix.CmsgLen(0)])) = rawMsgLen
	return r, nil
}

// RawPair opens two loopback UDP sockets, each sending to the other.
func RawPair() (cli, srv Side, err error) {
	a, err := newRawEnd()
	if err != nil {
		return nil, nil, err
	}
	b, err := newRawEnd()
	if err != nil {
		a.Close()
		return nil, nil, err
	}
	a.connect(b)
	b.connect(a)
	return a, b, nil
}

func (r *rawEnd) connect(o *rawEnd) { r.connectPort(o.port()) }

func (r *rawEnd) port() uint16 { return uint16(r.conn.LocalAddr().(*net.UDPAddr).Port) }

func (r *rawEnd) connectPort(port uint16) {
	r.peer = unix.RawSockaddrInet4{Family: unix.AF_INET, Port: port<<8 | port>>8, Addr: [4]byte{127, 0, 0, 1}}
}

// RawEnd is one end of the raw UDP echo on its own, for a ping-pong
// between two processes: each opens one, learns the other's port, and
// connects to it.
type RawEnd struct{ *rawEnd }

// OpenRaw opens a RawEnd on 127.0.0.1.
func OpenRaw() (RawEnd, error) {
	r, err := newRawEnd()
	return RawEnd{r}, err
}

// Port returns the end's UDP port.
func (r RawEnd) Port() uint16 { return r.port() }

// Connect makes the end send to the end at 127.0.0.1:port.
func (r RawEnd) Connect(port uint16) { r.connectPort(port) }

// Send implements Side: n datagrams as one GSO message.
func (r *rawEnd) Send(n int) error {
	iov := unix.Iovec{Base: &r.out[0]}
	iov.SetLen(rawMsgLen * n)
	h := unix.Msghdr{Name: (*byte)(unsafe.Pointer(&r.peer)), Namelen: unix.SizeofSockaddrInet4, Iov: &iov}
	h.SetIovlen(1)
	if n > 1 {
		h.Control = &r.ctrl[0]
		h.SetControllen(unix.CmsgSpace(2))
	}
	for {
		// Raw system calls on a non-blocking socket, as verbs/soft makes.
		_, _, errno := unix.RawSyscall(unix.SYS_SENDMSG, uintptr(r.fd), uintptr(unsafe.Pointer(&h)), 0)
		switch errno {
		case 0:
			return nil
		case unix.EAGAIN, unix.EINTR, unix.ENOBUFS:
			continue
		default:
			return fmt.Errorf("sendmsg: %w", errno)
		}
	}
}

// Poll implements Side: it receives without blocking and returns the number of datagrams.
func (r *rawEnd) Poll() (int, error) {
	for i := range r.hdrs {
		r.hdrs[i].Hdr.SetControllen(cmsgSpace)
	}
	n, _, errno := unix.RawSyscall6(unix.SYS_RECVMMSG, uintptr(r.fd), uintptr(unsafe.Pointer(&r.hdrs[0])), rawRxMsgs, unix.MSG_DONTWAIT, 0, 0)
	if errno != 0 {
		return 0, nil
	}
	k := 0
	for i := range int(n) {
		total := int(r.hdrs[i].Len)
		seg := total
		if r.hdrs[i].Hdr.Controllen > 0 {
			if s := int(*(*uint16)(unsafe.Pointer(&r.rctrl[i][unix.CmsgLen(0)]))); s > 0 {
				seg = s
			}
		}
		if seg > 0 {
			k += (total + seg - 1) / seg
		}
	}
	return k, nil
}

func (r *rawEnd) Close() { r.conn.Close() }
