package rocev2

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"
)

// TestUDImmICRC checks the incremental ICRC of header-only UD
// SEND_WITH_IMMs against the full computation, over streams where the PSN
// and immediate change every packet and, now and then, anything else does
// (flow, QPNs, Q_Key, P_Key, flags, the masked BTH byte 4).
func TestUDImmICRC(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	flows := []Flow{
		{Src: [4]byte{127, 0, 0, 1}, Dst: [4]byte{127, 0, 0, 2}, SrcPort: 1000, DstPort: 4791, FlagsFrag: 0x4000},
		{Src: [4]byte{10, 0, 0, 1}, Dst: [4]byte{10, 0, 0, 2}, SrcPort: 2000, DstPort: 4791, FlagsFrag: 0x4000},
	}
	var u UDImmICRC
	pk := Packet{Opcode: UDSendOnlyWithImm, PKey: 0xffff, DestQP: 5, QKey: 9, SrcQP: 7}
	buf := make([]byte, UDImmLen)
	f := &flows[0]
	for i := 0; i < 50000; i++ {
		switch r.IntN(40) {
		case 0:
			f = &flows[r.IntN(len(flows))]
		case 1:
			pk.SrcQP = r.Uint32N(1 << 24)
		case 2:
			pk.DestQP = r.Uint32N(1 << 24)
		case 3:
			pk.QKey = r.Uint32()
		case 4:
			pk.PKey ^= 0x8000
		case 5:
			pk.SE = !pk.SE
		case 6:
			pk.FECN = !pk.FECN // masked by the ICRC itself
		case 7:
			pk.AckReq = !pk.AckReq
		}
		pk.PSN = r.Uint32N(1 << 24)
		pk.Imm = r.Uint32()
		if n, err := pk.Encode(buf); err != nil || n != UDImmLen {
			t.Fatalf("encode: %d bytes, %v", n, err)
		}
		pre := f.Prefix(UDImmLen)
		if got, want := u.ICRC(pre, buf), ICRCFrom(pre, buf); got != want {
			t.Fatalf("packet %d (%+v): incremental ICRC %08x, full %08x", i, pk, got, want)
		}
	}
	// scapy's header-only SEND_WITH_IMM: the ICRC it put on the wire.
	raw := loadVectors(t)["ud_send_imm_header_only"]
	var fr Frame
	if err := DecodeFrame(raw, &fr); err != nil {
		t.Fatal(err)
	}
	pkt := raw[IPv4HeaderLen+UDPHeaderLen:]
	if len(pkt) != UDImmLen {
		t.Fatalf("scapy packet: %d bytes after the UDP header, want %d", len(pkt), UDImmLen)
	}
	var v UDImmICRC
	if got, want := v.ICRC(fr.Flow.Prefix(UDImmLen), pkt), binary.LittleEndian.Uint32(pkt[udImmBody:]); got != want {
		t.Fatalf("scapy packet: incremental ICRC %08x, on the wire %08x", got, want)
	}
}

func BenchmarkUDImmICRC(b *testing.B) {
	pk := Packet{Opcode: UDSendOnlyWithImm, PKey: 0xffff, DestQP: 0x123, QKey: 1, SrcQP: 2}
	buf := make([]byte, pk.Len())
	f := Flow{Src: [4]byte{127, 0, 0, 1}, Dst: [4]byte{127, 0, 0, 1}, SrcPort: 1, DstPort: 2, FlagsFrag: 0x4000}
	pre := f.Prefix(len(buf))
	var u UDImmICRC
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		pk.PSN = uint32(i) & 0xffffff
		pk.Imm = uint32(i * 7)
		pk.EncodeHeaders(buf, 0)
		_ = u.ICRC(pre, buf)
	}
}
