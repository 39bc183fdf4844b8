package rocev2

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"reflect"
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

// TestUDImmPut checks the direct encoder of the sequencer's packet (and
// its ICRC computed from the fields) against the general encoder and
// ICRCFrom, and that ParseUDImm reads it back.
func TestUDImmPut(t *testing.T) {
	f := Flow{Src: [4]byte{10, 0, 0, 1}, Dst: [4]byte{10, 0, 0, 2}, SrcPort: 49152, DstPort: 4791, FlagsFrag: 0x4000}
	pre := f.Prefix(UDImmLen)
	var u UDImmICRC
	r := rand.New(rand.NewPCG(5, 6))
	cases := []struct{ dqp, psn, qkey, sqp, imm uint32 }{
		{0x123, 7, 0x11111111, 0xabc, 0xdeadbeef},
		{0xffffff, 0xffffff, 0xffffffff, 0xffffff, 0xffffffff},
		{0, 0, 0, 0, 0},
	}
	for i := 0; i < 20000; i++ {
		c := cases[len(cases)-1]
		c.psn, c.imm = r.Uint32N(1<<24), r.Uint32()
		if i%50 == 0 {
			c.dqp, c.qkey, c.sqp = r.Uint32N(1<<24), r.Uint32(), r.Uint32N(1<<24)
		}
		cases = append(cases, c)
	}
	for _, c := range cases {
		want := make([]byte, UDImmLen)
		pk := Packet{Opcode: UDSendOnlyWithImm, PKey: DefaultPKey, DestQP: c.dqp, PSN: c.psn,
			QKey: c.qkey, SrcQP: c.sqp, Imm: c.imm}
		pk.EncodeHeaders(want, 0)
		binary.LittleEndian.PutUint32(want[udImmBody:], ICRCFrom(pre, want))
		got := make([]byte, UDImmLen)
		u.Put(got, pre, c.dqp, c.psn, c.qkey, c.sqp, c.imm)
		if string(got) != string(want) {
			t.Fatalf("%+v:\n got %x\nwant %x", c, got, want)
		}
		var back Packet
		if !ParseUDImm(got, &back) || !reflect.DeepEqual(back, pk) {
			t.Fatalf("%+v: parsed %+v", c, back)
		}
	}
	// Not the sequencer's packet: another length, opcode, pad or version.
	var p Packet
	b := make([]byte, UDImmLen)
	u.Put(b, pre, 1, 2, 3, 4, 5)
	for _, bad := range [][]byte{b[:UDImmLen-1], append(bytes.Clone(b), 0, 0, 0, 0),
		append([]byte{byte(UDSendOnly)}, b[1:]...), append([]byte{b[0], 0x10}, b[2:]...), append([]byte{b[0], 0x01}, b[2:]...)} {
		if ParseUDImm(bad, &p) {
			t.Errorf("ParseUDImm accepted % x", bad)
		}
	}
}

// BenchmarkUDImmPut is the transmit side: encode and ICRC from the
// fields.
func BenchmarkUDImmPut(b *testing.B) {
	f := Flow{Src: [4]byte{127, 0, 0, 1}, Dst: [4]byte{127, 0, 0, 1}, SrcPort: 1, DstPort: 2, FlagsFrag: 0x4000}
	pre := f.Prefix(UDImmLen)
	buf := make([]byte, 64*UDImmLen)
	var u UDImmICRC
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		u.Put(buf[i%64*UDImmLen:], pre, 0x123, uint32(i)&0xffffff, 1, 2, uint32(i*7))
	}
}

// BenchmarkUDImmICRC is the receive side: the ICRC of packets already in
// memory (a GRO batch), next to the Patcher and the full computation.
func BenchmarkUDImmICRC(b *testing.B) {
	f := Flow{Src: [4]byte{127, 0, 0, 1}, Dst: [4]byte{127, 0, 0, 1}, SrcPort: 1, DstPort: 2, FlagsFrag: 0x4000}
	pre := f.Prefix(UDImmLen)
	pkts := make([][]byte, 64)
	var u UDImmICRC
	for i := range pkts {
		pkts[i] = make([]byte, UDImmLen)
		u.Put(pkts[i], pre, 0x123, uint32(i), 1, 2, uint32(i*0x9e3779b9))
	}
	b.Run("UDImm", func(b *testing.B) {
		var u UDImmICRC
		for i := 0; i < b.N; i++ {
			_ = u.ICRC(pre, pkts[i%64])
		}
	})
	b.Run("Patcher", func(b *testing.B) {
		var p Patcher
		for i := 0; i < b.N; i++ {
			_ = p.ICRC(pre, pkts[i%64])
		}
	})
	b.Run("Full", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			_ = ICRCFrom(pre, pkts[i%64])
		}
	})
}
