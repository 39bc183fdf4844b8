package xdpprobe

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/seqd/seqd/verbs/soft/internal/xsk"
	"github.com/seqd/seqd/verbs/soft/xdp"
)

// roceIMM is the UDP payload of a header-only RoCEv2 UD SEND_ONLY with
// immediate, the sequencer's packet: BTH (opcode 0x65, P_Key 0xffff, dest
// QP 0x000011, PSN 1), DETH (Q_Key, source QP), ImmDt, and an ICRC slot
// (not computed: nothing here checks it). 28 bytes.
var roceIMM = []byte{
	0x65, 0x00, 0xff, 0xff, 0x00, 0x00, 0x00, 0x11, 0x00, 0x00, 0x00, 0x01,
	0x11, 0x11, 0x11, 0x11, 0x00, 0x00, 0x00, 0x22,
	0xde, 0xad, 0xbe, 0xef,
	0x00, 0x00, 0x00, 0x00,
}

// TestSteering: with the program on vb, in native and in generic mode,
// and an AF_XDP socket in copy mode on queue 0, every packet to UDP port
// 4791 reaches the socket, whole and in order, and none reaches the UDP
// socket bound to 4791, while packets to another port reach their UDP
// socket.
func TestSteering(t *testing.T) {
	r := newRig(t)
	for _, m := range []xsk.Mode{xsk.Native, xsk.Generic} {
		t.Run(m.String(), func(t *testing.T) { testSteering(t, r, m) })
	}
}

func testSteering(t *testing.T, r *rig, m xsk.Mode) {
	const nRoCE, nOther = 100, 10
	var got [][]byte
	var other, stolen int
	err := inNS(r.nsB, func() error {
		st, err := xdp.Attach(r.ifB, 1, xsk.Redirect, m)
		if err != nil {
			return err
		}
		defer st.Close()
		if zc, err := xsk.NewSocket(xsk.SocketConfig{Ifindex: r.ifB, ZeroCopy: true}); err == nil {
			t.Log("veth accepted an AF_XDP socket in zero-copy mode")
			zc.Close()
		} else {
			t.Logf("zero-copy on veth: %v", err)
		}
		s, err := xsk.NewSocket(xsk.SocketConfig{Ifindex: r.ifB, Frames: 256})
		if err != nil {
			return err
		}
		defer s.Close()
		if err := st.Register(0, s); err != nil {
			return err
		}
		roce, err := udpSocket(r.ipB, xsk.RoCEv2Port, true)
		if err != nil {
			return err
		}
		defer unix.Close(roce)
		oth, err := udpSocket(r.ipB, xsk.RoCEv2Port+1, true)
		if err != nil {
			return err
		}
		defer unix.Close(oth)
		if err := inNS(r.nsA, func() error {
			fd, err := udpSocket(r.ipA, 0, false)
			if err != nil {
				return err
			}
			defer unix.Close(fd)
			pkt := bytes.Clone(roceIMM)
			for i := range nRoCE {
				binary.BigEndian.PutUint32(pkt[8:], uint32(i)) // the PSN field carries i
				if err := unix.Sendto(fd, pkt, 0, &unix.SockaddrInet4{Addr: r.ipB, Port: xsk.RoCEv2Port}); err != nil {
					return err
				}
			}
			for range nOther {
				if err := unix.Sendto(fd, pkt, 0, &unix.SockaddrInet4{Addr: r.ipB, Port: xsk.RoCEv2Port + 1}); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			return err
		}
		frames := make([][]byte, 64)
		buf := make([]byte, 2048)
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline) && (len(got) < nRoCE || other < nOther); {
			n := s.Rx(frames)
			for _, f := range frames[:n] {
				got = append(got, bytes.Clone(f))
			}
			s.Refill()
			if _, _, err := unix.Recvfrom(oth, buf, 0); err == nil {
				other++
			}
			if n == 0 {
				time.Sleep(time.Millisecond)
			}
		}
		if _, _, err := unix.Recvfrom(roce, buf, 0); err == nil {
			stolen++
		} else if !errors.Is(err, unix.EAGAIN) {
			return err
		}
		return nil
	})
	if err != nil {
		skipUnsupported(t, err)
	}
	if len(got) != nRoCE || other != nOther || stolen != 0 {
		t.Fatalf("AF_XDP socket got %d of %d RoCEv2 packets, port 4792 got %d of %d, the UDP socket on 4791 got %d (want 0)", len(got), nRoCE, other, nOther, stolen)
	}
	for i, f := range got {
		if len(f) != hdrsLen+len(roceIMM) {
			t.Fatalf("frame %d: %d bytes, want %d", i, len(f), hdrsLen+len(roceIMM))
		}
		if dst := binary.BigEndian.Uint16(f[offUDPDst:]); dst != xsk.RoCEv2Port {
			t.Fatalf("frame %d: UDP destination %d", i, dst)
		}
		if psn := binary.BigEndian.Uint32(f[hdrsLen+8:]); psn != uint32(i) {
			t.Fatalf("frame %d carries packet %d: out of order", i, psn)
		}
		if !bytes.Equal(f[hdrsLen+12:], roceIMM[12:]) || f[hdrsLen] != roceIMM[0] {
			t.Fatalf("frame %d: payload %x", i, f[hdrsLen:])
		}
	}
}

// swapForEcho turns a received Ethernet/IPv4/UDP frame into its reply in
// place: MACs, IPv4 addresses and UDP ports swapped (the IPv4 checksum,
// a sum over them, does not change), and the UDP checksum 0, "none", as
// RDMA NICs send RoCEv2. It cannot be kept: a frame from a local sender
// over veth carries only the pseudo-header part of its UDP checksum
// (CHECKSUM_PARTIAL: the kernel would have finished it in the NIC), and
// a frame sent from the UMEM has no such offload, so the peer would drop
// the echo as corrupt.
func swapForEcho(f []byte) {
	for i := range 6 {
		f[i], f[6+i] = f[6+i], f[i]
	}
	const src, dst = ethLen + 12, ethLen + 16
	for i := range 4 {
		f[src+i], f[dst+i] = f[dst+i], f[src+i]
	}
	const sp = ethLen + ipv4Len
	f[sp], f[sp+1], f[sp+2], f[sp+3] = f[sp+2], f[sp+3], f[sp], f[sp+1]
	f[sp+6], f[sp+7] = 0, 0
}

// TestEcho: frames received on the AF_XDP socket (native XDP, copy mode)
// and sent back from the same UMEM frames with their headers swapped
// reach the sender's UDP socket, every one, with the payload it sent.
func TestEcho(t *testing.T) {
	r := newRig(t)
	const n = 200
	got := make(map[uint32]bool)
	var dbg string
	err := inNS(r.nsB, func() error {
		st, err := xdp.Attach(r.ifB, 1, xsk.Redirect, xsk.Native)
		if err != nil {
			return err
		}
		defer st.Close()
		s, err := xsk.NewSocket(xsk.SocketConfig{Ifindex: r.ifB, Frames: 256, TX: true})
		if err != nil {
			return err
		}
		defer s.Close()
		if err := st.Register(0, s); err != nil {
			return err
		}
		defer func() {
			st, _ := s.Stats()
			dbg = fmt.Sprintf("kicks %d, stats %+v, %s", s.Kicks(), st, s.Debug())
		}()
		return inNS(r.nsA, func() error {
			fd, err := udpSocket(r.ipA, 0, true)
			if err != nil {
				return err
			}
			defer unix.Close(fd)
			pkt := bytes.Clone(roceIMM)
			frames := make([][]byte, 64)
			buf := make([]byte, 2048)
			sent := 0
			for deadline := time.Now().Add(5 * time.Second); len(got) < n && time.Now().Before(deadline); {
				if sent < n {
					binary.BigEndian.PutUint32(pkt[8:], uint32(sent))
					if err := unix.Sendto(fd, pkt, 0, &unix.SockaddrInet4{Addr: r.ipB, Port: xsk.RoCEv2Port}); err != nil {
						return err
					}
					sent++
				}
				k := s.Rx(frames)
				for _, f := range frames[:k] {
					swapForEcho(f)
				}
				if k > 0 {
					if lost := s.Echo(); lost != 0 {
						t.Errorf("Echo could not queue %d frames", lost)
					}
				}
				s.Refill()
				for {
					m, _, err := unix.Recvfrom(fd, buf, 0)
					if err != nil {
						break
					}
					if m != len(roceIMM) || !bytes.Equal(buf[12:m], roceIMM[12:]) {
						return fmt.Errorf("echo of %d bytes: %x", m, buf[:m])
					}
					got[binary.BigEndian.Uint32(buf[8:])] = true
				}
				if k == 0 && sent == n {
					time.Sleep(time.Millisecond)
				}
			}
			return nil
		})
	})
	if err != nil {
		skipUnsupported(t, err)
	}
	if len(got) != n {
		t.Fatalf("%d of %d packets came back (%s)", len(got), n, dbg)
	}
}
