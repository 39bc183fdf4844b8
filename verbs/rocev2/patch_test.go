package rocev2

import (
	"math/rand/v2"
	"testing"
)

// TestPatcherMatchesFull is a differential test: over random streams of
// packets that change in random places (headers, payload, length, flow),
// the Patcher always agrees with the full computation.
func TestPatcherMatchesFull(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	flows := []Flow{
		{Src: [4]byte{127, 0, 0, 1}, Dst: [4]byte{127, 0, 0, 2}, SrcPort: 1000, DstPort: 4791, FlagsFrag: 0x4000},
		{Src: [4]byte{10, 0, 0, 1}, Dst: [4]byte{10, 0, 0, 2}, SrcPort: 2000, DstPort: 4791, FlagsFrag: 0x4000},
	}
	ops := []Opcode{UDSendOnlyWithImm, UDSendOnly, TransportRC | OpWriteOnly, TransportRC | OpAcknowledge, TransportRC | OpFetchAdd}
	var p Patcher
	buf := make([]byte, 128)
	pk := Packet{Opcode: UDSendOnlyWithImm, PKey: 0xffff, DestQP: 5, QKey: 9, SrcQP: 7}
	for i := 0; i < 20000; i++ {
		switch r.IntN(20) {
		case 0:
			pk.Opcode = ops[r.IntN(len(ops))]
		case 1:
			pk.SrcQP = r.Uint32N(1 << 24)
		case 2:
			pk.QKey = r.Uint32()
		case 3:
			pk.FECN = !pk.FECN // masked by the ICRC itself
		case 4:
			pk.PKey ^= 0x8000
		case 5:
			pk.Payload = make([]byte, r.IntN(48))
		case 6:
			if len(pk.Payload) > 0 {
				pk.Payload[r.IntN(len(pk.Payload))] ^= byte(r.Uint32())
			}
		}
		if !pk.Opcode.HasPayload() {
			pk.Payload = nil
		}
		pk.PSN = r.Uint32N(1 << 24)
		pk.Imm = r.Uint32()
		pk.DestQP = r.Uint32N(4)
		n, err := pk.Encode(buf)
		if err != nil {
			t.Fatal(err)
		}
		b := buf[:n]
		f := &flows[r.IntN(len(flows))%(1+i%7/6)] // mostly one flow
		pre := f.Prefix(len(b))
		if got, want := p.ICRC(pre, b), ICRCFrom(pre, b); got != want {
			t.Fatalf("packet %d (%v, %d bytes): patched ICRC %08x, full %08x", i, pk.Opcode, n, got, want)
		}
	}
}

func BenchmarkPatcherUD(b *testing.B) {
	pk := Packet{Opcode: UDSendOnlyWithImm, PKey: 0xffff, DestQP: 0x123, QKey: 1, SrcQP: 2}
	buf := make([]byte, pk.Len())
	f := Flow{Src: [4]byte{127, 0, 0, 1}, Dst: [4]byte{127, 0, 0, 1}, SrcPort: 1, DstPort: 2, FlagsFrag: 0x4000}
	pre := f.Prefix(len(buf))
	var p Patcher
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		pk.PSN = uint32(i) & 0xffffff
		pk.Imm = uint32(i * 7)
		pk.EncodeHeaders(buf, 0)
		_ = p.ICRC(pre, buf)
	}
}

func BenchmarkFullUD(b *testing.B) {
	pk := Packet{Opcode: UDSendOnlyWithImm, PKey: 0xffff, DestQP: 0x123, QKey: 1, SrcQP: 2}
	buf := make([]byte, pk.Len())
	f := Flow{Src: [4]byte{127, 0, 0, 1}, Dst: [4]byte{127, 0, 0, 1}, SrcPort: 1, DstPort: 2, FlagsFrag: 0x4000}
	pre := f.Prefix(len(buf))
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		pk.PSN = uint32(i) & 0xffffff
		pk.Imm = uint32(i * 7)
		pk.EncodeHeaders(buf, 0)
		_ = ICRCFrom(pre, buf)
	}
}
