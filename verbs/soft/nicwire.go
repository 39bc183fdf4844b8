//go:build linux

package soft

import (
	"encoding/binary"
	"math/rand/v2"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/seqd/seqd/verbs/rocev2"
)

// nicwire=on makes a soft device behave on the wire as an RDMA NIC does,
// for interoperability tests without one (it needs CAP_NET_RAW):
//
//   - it listens on the RoCEv2 port, 4791, only;
//   - it sends every packet from a UDP source port chosen at random per
//     address handle (per connected QP for RC and UC) in the RoCE range
//     0xC000-0xFFFF, as mlx5's mlx5_ah_set_udp_sport does, to port 4791;
//   - it stamps every packet with a real, non-zero IPv4 ID (a counter per
//     queue), and its ICRC is computed over that ID, through a raw
//     IP_HDRINCL socket that writes the IPv4 and UDP headers itself.
//
// It never uses UDP GSO. Receiving is as for any soft device (the ICRC is
// accepted for whatever ID the sender stamped).

// nicSourcePort returns a random UDP source port in the RoCE range.
func nicSourcePort() uint16 { return 0xc000 | uint16(rand.N(0x4000)) }

// txHdrLen is the IPv4 and UDP header a nicwire queue writes per packet.
const txHdrLen = rocev2.IPv4HeaderLen + rocev2.UDPHeaderLen

// openRaw opens the queue's IP_HDRINCL socket.
func (q *queue) openRaw() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.IPPROTO_RAW)
	if err != nil {
		return err
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, q.d.cfg.sndbuf); err != nil {
		unix.Close(fd)
		return err
	}
	q.raw, q.nicwire = fd, true
	q.gso = false
	q.rawHdr = make([]byte, txMaxPkts*txHdrLen)
	q.rawIov = make([]unix.Iovec, 2*txMaxPkts)
	q.nextID = uint16(1 + rand.N(0xfffe))
	return nil
}

// txFD is the socket packets leave through.
func (q *queue) txFD() int {
	if q.nicwire {
		return q.raw
	}
	return q.fd
}

// buildRaw fills one message per packet of pkts[from:]: its IPv4 and UDP
// headers, written here, then the transport packet, whose ICRC is moved
// to the packet's IPv4 ID.
func (q *queue) buildRaw(from int) {
	q.nhdr = 0
	for i := from; i < len(q.pkts); i++ {
		p := &q.pkts[i]
		id := q.nextID
		if q.nextID++; q.nextID == 0 {
			q.nextID = 1
		}
		q.stampID(p, id)
		k := q.nhdr
		h := q.rawHdr[k*txHdrLen : (k+1)*txHdrLen]
		putIPv4UDP(h, &p.pe.flow, id, uint8(q.d.cfg.tos), int(p.n))
		iov := q.rawIov[2*k : 2*k+2]
		iov[0] = unix.Iovec{Base: &h[0]}
		iov[0].SetLen(txHdrLen)
		iov[1] = unix.Iovec{Base: &q.arena[p.off]}
		iov[1].SetLen(int(p.n))
		m := &q.hdrs[k].Hdr
		*m = unix.Msghdr{Name: (*byte)(unsafe.Pointer(&p.pe.sa)), Namelen: unix.SizeofSockaddrInet4, Iov: &iov[0]}
		m.SetIovlen(2)
		q.hdrPkt[k] = i
		q.nhdr++
	}
}

// putIPv4UDP writes the IPv4 header (DF, TTL 64, checksum) and UDP header
// (checksum 0, as RoCEv2 senders may leave it) of an n-byte transport
// packet on flow f with IPv4 ID id.
func putIPv4UDP(h []byte, f *rocev2.Flow, id uint16, tos uint8, n int) {
	_ = h[txHdrLen-1]
	h[0], h[1] = 0x45, tos
	binary.BigEndian.PutUint16(h[2:], uint16(txHdrLen+n))
	binary.BigEndian.PutUint16(h[4:], id)
	binary.BigEndian.PutUint16(h[6:], 0x4000)
	h[8], h[9] = 64, 17
	h[10], h[11] = 0, 0
	copy(h[12:16], f.Src[:])
	copy(h[16:20], f.Dst[:])
	var sum uint32
	for i := 0; i < rocev2.IPv4HeaderLen; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(h[i:]))
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	binary.BigEndian.PutUint16(h[10:], ^uint16(sum))
	u := h[rocev2.IPv4HeaderLen:]
	binary.BigEndian.PutUint16(u[0:], f.SrcPort)
	binary.BigEndian.PutUint16(u[2:], f.DstPort)
	binary.BigEndian.PutUint16(u[4:], uint16(rocev2.UDPHeaderLen+n))
	u[6], u[7] = 0, 0
}
