package rocev2

import (
	"encoding/binary"
	"fmt"
)

// Frame is a whole RoCEv2 packet from the first byte of its IPv4 header,
// as tools such as scapy and tshark show it.
type Frame struct {
	TOS         uint8
	TTL         uint8
	Flow        Flow
	UDPChecksum uint16
	Packet      Packet
}

// DecodeFrame parses an IPv4/UDP/RoCEv2 packet and checks its ICRC.
func DecodeFrame(b []byte, fr *Frame) error {
	if len(b) < IPv4HeaderLen+UDPHeaderLen {
		return ErrTruncated
	}
	if b[0] != 0x45 || b[9] != ipProtoUDP {
		return ErrNotRoCE
	}
	total := int(binary.BigEndian.Uint16(b[2:]))
	if total != len(b) {
		return fmt.Errorf("%w: IPv4 total length %d, have %d bytes", ErrTruncated, total, len(b))
	}
	udp := b[IPv4HeaderLen:]
	if int(binary.BigEndian.Uint16(udp[4:])) != len(udp) {
		return fmt.Errorf("%w: UDP length", ErrTruncated)
	}
	*fr = Frame{TOS: b[1], TTL: b[8], UDPChecksum: binary.BigEndian.Uint16(udp[6:])}
	f := &fr.Flow
	f.IHLVersion = b[0]
	f.ID = binary.BigEndian.Uint16(b[4:])
	f.FlagsFrag = binary.BigEndian.Uint16(b[6:])
	copy(f.Src[:], b[12:16])
	copy(f.Dst[:], b[16:20])
	f.SrcPort = binary.BigEndian.Uint16(udp[0:])
	f.DstPort = binary.BigEndian.Uint16(udp[2:])
	pkt := udp[UDPHeaderLen:]
	if err := fr.Packet.Decode(pkt); err != nil {
		return err
	}
	if !VerifyICRC(f, pkt) {
		return ErrBadICRC
	}
	return nil
}

// AppendFrame appends fr as an IPv4/UDP/RoCEv2 packet with a correct IPv4
// header checksum and ICRC. The UDP checksum is written as given (RoCEv2
// senders may leave it 0).
func AppendFrame(b []byte, fr *Frame) ([]byte, error) {
	n := fr.Packet.Len()
	start := len(b)
	b = append(b, make([]byte, IPv4HeaderLen+UDPHeaderLen+n)...)
	ip := b[start:]
	f := &fr.Flow
	ip[0] = 0x45
	ip[1] = fr.TOS
	binary.BigEndian.PutUint16(ip[2:], uint16(IPv4HeaderLen+UDPHeaderLen+n))
	binary.BigEndian.PutUint16(ip[4:], f.ID)
	binary.BigEndian.PutUint16(ip[6:], f.FlagsFrag)
	ip[8] = fr.TTL
	ip[9] = ipProtoUDP
	copy(ip[12:], f.Src[:])
	copy(ip[16:], f.Dst[:])
	binary.BigEndian.PutUint16(ip[10:], ipChecksum(ip[:IPv4HeaderLen]))
	udp := ip[IPv4HeaderLen:]
	binary.BigEndian.PutUint16(udp[0:], f.SrcPort)
	binary.BigEndian.PutUint16(udp[2:], f.DstPort)
	binary.BigEndian.PutUint16(udp[4:], uint16(UDPHeaderLen+n))
	binary.BigEndian.PutUint16(udp[6:], fr.UDPChecksum)
	pkt := udp[UDPHeaderLen:]
	if _, err := fr.Packet.Encode(pkt); err != nil {
		return b[:start], err
	}
	PutICRC(f, pkt)
	return b, nil
}

func ipChecksum(h []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(h); i += 2 {
		if i == 10 {
			continue
		}
		sum += uint32(binary.BigEndian.Uint16(h[i:]))
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	return ^uint16(sum)
}
