package xsk

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// xdpZeroCopy is XDP_ZEROCOPY, the bind flag golang.org/x/sys/unix lacks.
const xdpZeroCopy = 1 << 2

// SocketConfig describes one AF_XDP socket and its UMEM.
type SocketConfig struct {
	Ifindex  int
	Queue    int  // the receive queue it binds to
	Frames   int  // UMEM frames, a power of two (default 4096)
	ZeroCopy bool // bind with XDP_ZEROCOPY instead of XDP_COPY
	// TryZeroCopy binds with XDP_ZEROCOPY where the driver offers it and
	// with XDP_COPY otherwise (Socket.ZeroCopy says which).
	TryZeroCopy bool
	// FrameSize is the size of a UMEM frame: 2048 (the default) or 4096.
	// A frame holds a packet of up to FrameSize-256 bytes (XDP's
	// headroom); the kernel drops longer ones (Stats' RX drops).
	FrameSize int
	TX        bool // also a TX ring, for Echo
}

// Socket is an AF_XDP socket with a UMEM of its own: the RX and fill
// rings, the completion ring, and with SocketConfig.TX a TX ring. Every
// frame is in exactly one place: the fill ring (the kernel may receive
// into it), the RX ring, the caller's hands between Rx and Refill or
// Echo, the TX ring, or the completion ring. The fill and completion
// rings hold every frame, so neither can overflow.
type Socket struct {
	fd        int
	umem      []byte
	frameSize uint64
	fill      ring
	comp      ring
	rx        ring
	tx        ring
	held      []unix.XDPDesc // frames handed out by the last Rx
	zeroCopy  bool
	wakeups   uint64
	kicks     uint64
}

// ring is one of the four single-producer single-consumer rings shared
// with the kernel: a producer and a consumer index, flags, and a power of
// two of descriptors (8-byte addresses for fill and completion, 16-byte
// unix.XDPDesc for RX and TX).
type ring struct {
	mem   []byte
	prod  *uint32
	cons  *uint32
	flags *uint32
	desc  unsafe.Pointer
	mask  uint32
}

func (r *ring) mmap(fd int, pgoff int64, off unix.XDPRingOffset, n, descSize int) error {
	mem, err := unix.Mmap(fd, pgoff, int(off.Desc)+n*descSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return err
	}
	base := unsafe.Pointer(&mem[0])
	r.mem = mem
	r.prod = (*uint32)(unsafe.Add(base, off.Producer))
	r.cons = (*uint32)(unsafe.Add(base, off.Consumer))
	r.flags = (*uint32)(unsafe.Add(base, off.Flags))
	r.desc = unsafe.Add(base, off.Desc)
	r.mask = uint32(n - 1)
	return nil
}

func (r *ring) addr(i uint32) *uint64 {
	return (*uint64)(unsafe.Add(r.desc, uintptr(i&r.mask)*8))
}

func (r *ring) xdpDesc(i uint32) *unix.XDPDesc {
	return (*unix.XDPDesc)(unsafe.Add(r.desc, uintptr(i&r.mask)*unsafe.Sizeof(unix.XDPDesc{})))
}

// NewSocket opens and binds an AF_XDP socket. It fails with
// ErrUnsupported when the kernel has no AF_XDP or the driver refuses the
// mode.
func NewSocket(c SocketConfig) (_ *Socket, err error) {
	if c.Frames == 0 {
		c.Frames = 4096
	}
	if c.Frames&(c.Frames-1) != 0 {
		return nil, fmt.Errorf("xsk: %d frames is not a power of two", c.Frames)
	}
	if c.FrameSize == 0 {
		c.FrameSize = 2048
	}
	if c.FrameSize != 2048 && c.FrameSize != 4096 {
		return nil, fmt.Errorf("xsk: frame size %d: want 2048 or 4096", c.FrameSize)
	}
	fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("%w: AF_XDP socket: %v", ErrUnsupported, err)
	}
	s := &Socket{fd: fd, frameSize: uint64(c.FrameSize), held: make([]unix.XDPDesc, 0, c.Frames)}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	s.umem, err = unix.Mmap(-1, 0, c.Frames*int(s.frameSize), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	if err != nil {
		return nil, fmt.Errorf("xsk: UMEM: %v", err)
	}
	reg := unix.XDPUmemReg{Addr: uint64(uintptr(unsafe.Pointer(&s.umem[0]))), Len: uint64(len(s.umem)), Size: uint32(s.frameSize)}
	if err := setsockopt(fd, unix.XDP_UMEM_REG, unsafe.Pointer(&reg), unsafe.Sizeof(reg)); err != nil {
		return nil, fmt.Errorf("xsk: XDP_UMEM_REG: %v", err)
	}
	rxN := c.Frames / 2
	rings := []struct{ opt, n int }{{unix.XDP_UMEM_FILL_RING, c.Frames}, {unix.XDP_UMEM_COMPLETION_RING, c.Frames}, {unix.XDP_RX_RING, rxN}}
	if c.TX {
		rings = append(rings, struct{ opt, n int }{unix.XDP_TX_RING, rxN})
	}
	for _, o := range rings {
		if err := unix.SetsockoptInt(fd, unix.SOL_XDP, o.opt, o.n); err != nil {
			return nil, fmt.Errorf("xsk: ring size option %d: %v", o.opt, err)
		}
	}
	var off unix.XDPMmapOffsets
	ol := uint32(unsafe.Sizeof(off))
	if _, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_XDP, unix.XDP_MMAP_OFFSETS, uintptr(unsafe.Pointer(&off)), uintptr(unsafe.Pointer(&ol)), 0); e != 0 {
		return nil, fmt.Errorf("xsk: XDP_MMAP_OFFSETS: %v", e)
	}
	if err := s.fill.mmap(fd, unix.XDP_UMEM_PGOFF_FILL_RING, off.Fr, c.Frames, 8); err != nil {
		return nil, fmt.Errorf("xsk: fill ring: %v", err)
	}
	if err := s.comp.mmap(fd, unix.XDP_UMEM_PGOFF_COMPLETION_RING, off.Cr, c.Frames, 8); err != nil {
		return nil, fmt.Errorf("xsk: completion ring: %v", err)
	}
	if err := s.rx.mmap(fd, unix.XDP_PGOFF_RX_RING, off.Rx, rxN, int(unsafe.Sizeof(unix.XDPDesc{}))); err != nil {
		return nil, fmt.Errorf("xsk: RX ring: %v", err)
	}
	if c.TX {
		if err := s.tx.mmap(fd, unix.XDP_PGOFF_TX_RING, off.Tx, rxN, int(unsafe.Sizeof(unix.XDPDesc{}))); err != nil {
			return nil, fmt.Errorf("xsk: TX ring: %v", err)
		}
	}
	// Every frame starts in the fill ring.
	for i := 0; i < c.Frames; i++ {
		*s.fill.addr(uint32(i)) = uint64(i) * s.frameSize
	}
	atomic.StoreUint32(s.fill.prod, uint32(c.Frames))
	if c.TryZeroCopy {
		if err := s.bind(c, true); err == nil {
			s.zeroCopy = true
			return s, nil
		}
	}
	if err := s.bind(c, c.ZeroCopy); err != nil {
		return nil, err
	}
	s.zeroCopy = c.ZeroCopy
	return s, nil
}

// bind binds s to its interface and queue, in zero-copy or copy mode.
func (s *Socket) bind(c SocketConfig, zeroCopy bool) error {
	flags := uint16(unix.XDP_COPY)
	if zeroCopy {
		flags = xdpZeroCopy
	}
	sa := &unix.SockaddrXDP{Flags: flags | unix.XDP_USE_NEED_WAKEUP, Ifindex: uint32(c.Ifindex), QueueID: uint32(c.Queue)}
	// A socket closed on this queue a moment ago may still hold it: the
	// kernel releases its UMEM from a work queue (EBUSY until then).
	err := unix.Bind(s.fd, sa)
	for i := 0; errors.Is(err, unix.EBUSY) && i < 100; i++ {
		time.Sleep(10 * time.Millisecond)
		err = unix.Bind(s.fd, sa)
	}
	if err != nil {
		return fmt.Errorf("%w: binding AF_XDP (zerocopy=%v) to ifindex %d queue %d: %w", ErrUnsupported, zeroCopy, c.Ifindex, c.Queue, err)
	}
	return nil
}

// ZeroCopy reports whether s is bound in zero-copy mode.
func (s *Socket) ZeroCopy() bool { return s.zeroCopy }

// FD is the socket's descriptor: readable (poll, epoll) while its RX ring
// holds packets.
func (s *Socket) FD() int { return s.fd }

// Pending returns how many packets the RX ring holds.
func (s *Socket) Pending() int { return int(atomic.LoadUint32(s.rx.prod) - *s.rx.cons) }

// Debug describes the rings' indexes, for test failures.
func (s *Socket) Debug() string {
	d := fmt.Sprintf("fill prod %d cons %d, rx prod %d cons %d", *s.fill.prod, *s.fill.cons, *s.rx.prod, *s.rx.cons)
	if s.tx.mem != nil {
		d += fmt.Sprintf(", tx prod %d cons %d, comp prod %d", *s.tx.prod, *s.tx.cons, *s.comp.prod)
	}
	return d
}

func setsockopt(fd, opt int, p unsafe.Pointer, n uintptr) error {
	if _, _, e := unix.Syscall6(unix.SYS_SETSOCKOPT, uintptr(fd), unix.SOL_XDP, uintptr(opt), uintptr(p), n, 0); e != 0 {
		return e
	}
	return nil
}

// Rx fills frames with the packets (whole Ethernet frames, in the UMEM)
// the kernel has put on the RX ring, at most len(frames), and returns how
// many. They stay valid until Refill. It makes no system call.
func (s *Socket) Rx(frames [][]byte) int {
	cons := *s.rx.cons // only this side writes it
	avail := atomic.LoadUint32(s.rx.prod) - cons
	n := min(int(avail), len(frames), cap(s.held)-len(s.held))
	for i := 0; i < n; i++ {
		d := s.rx.xdpDesc(cons + uint32(i))
		frames[i] = s.umem[d.Addr : d.Addr+uint64(d.Len) : d.Addr+uint64(d.Len)]
		s.held = append(s.held, *d)
	}
	if n > 0 {
		atomic.StoreUint32(s.rx.cons, cons+uint32(n))
	}
	return n
}

// RxTime returns the receive time (CLOCK_MONOTONIC nanoseconds) the
// steering program stored in the metadata before frame, a frame the
// last Rx returned, or 0 when it stored none (a frame too close to the
// start of its UMEM chunk to hold it).
func (s *Socket) RxTime(frame []byte) uint64 {
	if len(frame) == 0 {
		return 0
	}
	off := uint64(uintptr(unsafe.Pointer(&frame[0])) - uintptr(unsafe.Pointer(&s.umem[0])))
	if off%s.frameSize < MetaLen {
		return 0
	}
	return *(*uint64)(unsafe.Pointer(&s.umem[off-MetaLen]))
}

// Refill gives the frames of the last Rx calls, and the transmitted
// frames the completion ring returns, back to the kernel through the fill
// ring, and wakes the kernel with a system call only when it asks to be
// (need_wakeup).
func (s *Socket) Refill() {
	prod := *s.fill.prod
	for _, d := range s.held {
		*s.fill.addr(prod) = d.Addr &^ (s.frameSize - 1)
		prod++
	}
	s.held = s.held[:0]
	if s.comp.mem != nil {
		cons := *s.comp.cons
		end := atomic.LoadUint32(s.comp.prod)
		for ; cons != end; cons++ {
			*s.fill.addr(prod) = *s.comp.addr(cons) &^ (s.frameSize - 1)
			prod++
		}
		atomic.StoreUint32(s.comp.cons, cons)
	}
	atomic.StoreUint32(s.fill.prod, prod)
	if atomic.LoadUint32(s.fill.flags)&unix.XDP_RING_NEED_WAKEUP != 0 {
		s.wakeups++
		unix.Syscall6(unix.SYS_RECVFROM, uintptr(s.fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
	}
}

// Echo transmits the frames of the last Rx calls, as the caller left
// them (same length), instead of giving them back to the fill ring, and
// kicks the kernel: in copy mode the kernel transmits inside sendto, at
// most a few dozen frames a call, so it kicks until the TX ring is
// drained or the kernel refuses. Frames come back through the completion
// ring (Refill). It returns the frames it could not queue, which go back
// to the fill ring.
func (s *Socket) Echo() int {
	prod := *s.tx.prod
	free := uint32(len(s.held)) // a TX ring as deep as RX never holds more than the frames in flight
	if room := s.tx.mask + 1 - (prod - atomic.LoadUint32(s.tx.cons)); room < free {
		free = room
	}
	for i := range free {
		*s.tx.xdpDesc(prod + i) = unix.XDPDesc{Addr: s.held[i].Addr, Len: s.held[i].Len}
	}
	atomic.StoreUint32(s.tx.prod, prod+free)
	dropped := len(s.held) - int(free)
	copy(s.held, s.held[free:])
	s.held = s.held[:dropped]
	for i := 0; i < 64 && atomic.LoadUint32(s.tx.cons) != prod+free; i++ {
		s.kicks++
		if _, _, e := unix.Syscall6(unix.SYS_SENDTO, uintptr(s.fd), 0, 0, unix.MSG_DONTWAIT, 0, 0); e != 0 && e != unix.EAGAIN && e != unix.EBUSY {
			break
		}
	}
	return dropped
}

// Wakeups is how many system calls Refill made because the kernel asked.
func (s *Socket) Wakeups() uint64 { return s.wakeups }

// Kicks is how many sendto calls Echo made.
func (s *Socket) Kicks() uint64 { return s.kicks }

// Stats are the kernel's XDP_STATISTICS for the socket.
func (s *Socket) Stats() (unix.XDPStatistics, error) {
	var st unix.XDPStatistics
	l := uint32(unsafe.Sizeof(st))
	if _, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(s.fd), unix.SOL_XDP, unix.XDP_STATISTICS, uintptr(unsafe.Pointer(&st)), uintptr(unsafe.Pointer(&l)), 0); e != 0 {
		return st, e
	}
	return st, nil
}

// Close unbinds the socket and unmaps its rings and UMEM.
func (s *Socket) Close() error {
	err := unix.Close(s.fd)
	for _, r := range []*ring{&s.fill, &s.comp, &s.rx, &s.tx} {
		if r.mem != nil {
			unix.Munmap(r.mem)
			r.mem = nil
		}
	}
	if s.umem != nil {
		unix.Munmap(s.umem)
		s.umem = nil
	}
	return err
}
