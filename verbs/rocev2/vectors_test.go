package rocev2

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"hash/crc32"
	"os"
	"reflect"
	"strings"
	"testing"
)

// loadVectors reads the scapy-built packets. The file is a copy of
// shared/vectors/rocev2-scapy.txt, kept in testdata so the package tests
// are self-contained.
func loadVectors(t testing.TB) map[string][]byte {
	f, err := os.Open("testdata/rocev2-scapy.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	v := map[string][]byte{}
	s := bufio.NewScanner(f)
	for s.Scan() {
		line := strings.TrimSpace(s.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		name, hx, ok := strings.Cut(line, " ")
		if !ok {
			t.Fatalf("bad vector line %q", line)
		}
		b, err := hex.DecodeString(strings.TrimSpace(hx))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		v[name] = b
	}
	if len(v) != 4 {
		t.Fatalf("want 4 vectors, got %d", len(v))
	}
	return v
}

func TestScapyVectors(t *testing.T) {
	vecs := loadVectors(t)
	src, dst := [4]byte{10, 0, 0, 1}, [4]byte{10, 0, 0, 2}
	tests := []struct {
		name string
		want Packet
		flow Flow
	}{
		{"ud_send_imm_header_only", Packet{Opcode: UDSendOnlyWithImm, PKey: 0xffff, DestQP: 0x123, PSN: 7,
			QKey: 0x11111111, SrcQP: 0xabc, Imm: 0xdeadbeef},
			Flow{Src: src, Dst: dst, SrcPort: 49152, DstPort: 4791, ID: 0x1234, FlagsFrag: 0x4000}},
		{"uc_rdma_write_only", Packet{Opcode: TransportUC | OpWriteOnly, PKey: 0xffff, DestQP: 0x456, PSN: 100,
			VA: 0x00007f0000001000, RKey: 0xabcdef01, DMALen: 16,
			Payload: []byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}},
			Flow{Src: src, Dst: dst, SrcPort: 49153, DstPort: 4791, ID: 1, FlagsFrag: 0x4000}},
		{"rc_fetch_add", Packet{Opcode: TransportRC | OpFetchAdd, PKey: 0xffff, DestQP: 0x789, PSN: 5, AckReq: true,
			VA: 0x00007f0000002000, RKey: 0x01020304, SwapAdd: 1, Compare: 0},
			Flow{Src: src, Dst: dst, SrcPort: 49154, DstPort: 4791, ID: 2, FlagsFrag: 0x4000}},
		{"rc_atomic_ack", Packet{Opcode: TransportRC | OpAtomicAcknowledge, PKey: 0xffff, DestQP: 0xabc, PSN: 5,
			Syndrome: 0x1f, MSN: 1, OrigData: 41},
			Flow{Src: dst, Dst: src, SrcPort: 49155, DstPort: 4791, ID: 3, FlagsFrag: 0x4000}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			raw := vecs[tt.name]
			var fr Frame
			if err := DecodeFrame(raw, &fr); err != nil {
				t.Fatalf("decode: %v", err)
			}
			got := fr.Packet
			if !bytes.Equal(got.Payload, tt.want.Payload) {
				t.Errorf("payload = %x, want %x", got.Payload, tt.want.Payload)
			}
			got.Payload, tt.want.Payload = nil, nil
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("packet =\n %+v\nwant\n %+v", got, tt.want)
			}
			tt.flow.IHLVersion = 0x45
			if fr.Flow != tt.flow {
				t.Errorf("flow = %+v, want %+v", fr.Flow, tt.flow)
			}
			// Re-encode byte-exact.
			out, err := AppendFrame(nil, &fr)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(out, raw) {
				t.Errorf("re-encoded\n %x\nwant\n %x", out, raw)
			}
			// A flipped bit in a covered field breaks the ICRC; one in a
			// masked field (TTL) does not.
			bad := bytes.Clone(raw)
			bad[IPv4HeaderLen+UDPHeaderLen+7] ^= 1 // DestQP
			if err := DecodeFrame(bad, &fr); err != ErrBadICRC {
				t.Errorf("corrupted DestQP: err = %v, want ErrBadICRC", err)
			}
			masked := bytes.Clone(raw)
			masked[8] = 1 // TTL (IPv4 checksum not checked by the ICRC)
			if err := DecodeFrame(masked, &fr); err != nil {
				t.Errorf("changed TTL: %v", err)
			}
		})
	}
}

func TestHeaderLen(t *testing.T) {
	tests := []struct {
		op   Opcode
		want int
	}{
		{UDSendOnlyWithImm, 24},
		{UDSendOnly, 20},
		{TransportUC | OpWriteOnly, 28},
		{TransportRC | OpWriteOnlyWithImm, 32},
		{TransportRC | OpFetchAdd, 40},
		{TransportRC | OpAtomicAcknowledge, 24},
		{TransportRC | OpAcknowledge, 16},
		{TransportRC | OpReadResponseMiddle, 12},
		{TransportUD | OpWriteOnly, 0},
		{TransportUC | OpFetchAdd, 0},
		{0x1f, 0},
	}
	for _, tt := range tests {
		if got := tt.op.HeaderLen(); got != tt.want {
			t.Errorf("%v: HeaderLen = %d, want %d", tt.op, got, tt.want)
		}
	}
}

func TestRoundTripPad(t *testing.T) {
	for n := 0; n < 9; n++ {
		p := Packet{Opcode: TransportRC | OpSendOnly, DestQP: 9, PSN: 0xffffff, Payload: bytes.Repeat([]byte{0xab}, n)}
		b := make([]byte, p.Len())
		if _, err := p.Encode(b); err != nil {
			t.Fatal(err)
		}
		if len(b)%4 != 0 {
			t.Errorf("n=%d: encoded length %d not 4-aligned", n, len(b))
		}
		var q Packet
		if err := q.Decode(b); err != nil {
			t.Fatalf("n=%d: %v", n, err)
		}
		if !bytes.Equal(q.Payload, p.Payload) || q.PSN != p.PSN || q.DestQP != 9 {
			t.Errorf("n=%d: round trip %+v", n, q)
		}
	}
}

func TestDecodeErrors(t *testing.T) {
	var p Packet
	for _, b := range [][]byte{nil, {0x65}, make([]byte, 15)} {
		if err := p.Decode(b); err == nil {
			t.Errorf("decode %x: no error", b)
		}
	}
	// Valid BTH, truncated DETH.
	b := []byte{0x65, 0, 0xff, 0xff, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0}
	if err := p.Decode(b); err == nil {
		t.Error("truncated DETH accepted")
	}
	// ACK with payload.
	ack := Packet{Opcode: TransportRC | OpAcknowledge}
	buf := make([]byte, ack.Len()+4)
	ack.Encode(buf)
	if err := p.Decode(buf); err == nil {
		t.Error("ACK with payload accepted")
	}
}

func FuzzDecode(f *testing.F) {
	for _, v := range loadVectors(f) {
		f.Add(v[IPv4HeaderLen+UDPHeaderLen:])
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var p Packet
		if err := p.Decode(b); err != nil {
			return
		}
		// What decodes re-encodes to the same headers and payload.
		out := make([]byte, p.Len())
		if _, err := p.Encode(out); err != nil {
			t.Fatalf("decoded %+v but encode failed: %v", p, err)
		}
		var q Packet
		if err := q.Decode(out); err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		if !bytes.Equal(q.Payload, p.Payload) {
			t.Fatalf("payload changed")
		}
		q.Payload, p.Payload = nil, nil
		q.PadCnt, p.PadCnt = 0, 0
		if !reflect.DeepEqual(q, p) {
			t.Fatalf("round trip changed packet:\n%+v\n%+v", p, q)
		}
	})
}

func FuzzDecodeFrame(f *testing.F) {
	for _, v := range loadVectors(f) {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var fr Frame
		_ = DecodeFrame(b, &fr)
	})
}

func BenchmarkICRCHeaderOnly(b *testing.B) {
	p := Packet{Opcode: UDSendOnlyWithImm, DestQP: 0x123, QKey: 1, SrcQP: 2, Imm: 3}
	buf := make([]byte, p.Len())
	p.Encode(buf)
	f := Flow{Src: [4]byte{127, 0, 0, 1}, Dst: [4]byte{127, 0, 0, 1}, SrcPort: 1, DstPort: 2, FlagsFrag: 0x4000}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		PutICRC(&f, buf)
	}
}

func BenchmarkDecodeHeaderOnly(b *testing.B) {
	p := Packet{Opcode: UDSendOnlyWithImm, DestQP: 0x123, QKey: 1, SrcQP: 2, Imm: 3}
	buf := make([]byte, p.Len())
	p.Encode(buf)
	b.ReportAllocs()
	var q Packet
	for i := 0; i < b.N; i++ {
		if err := q.Decode(buf); err != nil {
			b.Fatal(err)
		}
	}
}

func TestCRCMatchesStdlib(t *testing.T) {
	buf := make([]byte, 300)
	for i := range buf {
		buf[i] = byte(i*7 + 3)
	}
	for n := 0; n <= len(buf); n++ {
		if got, want := crcUpdate(0x1234, buf[:n]), crc32.Update(0x1234, crc32.IEEETable, buf[:n]); got != want {
			t.Fatalf("n=%d: crc %08x, want %08x", n, got, want)
		}
	}
}

func TestICRCFromPrefix(t *testing.T) {
	for name, raw := range loadVectors(t) {
		var fr Frame
		if err := DecodeFrame(raw, &fr); err != nil {
			t.Fatal(err)
		}
		pkt := raw[IPv4HeaderLen+UDPHeaderLen:]
		if got, want := ICRCFrom(fr.Flow.Prefix(len(pkt)), pkt), ICRC(&fr.Flow, pkt); got != want {
			t.Errorf("%s: ICRCFrom = %08x, ICRC = %08x", name, got, want)
		}
	}
}

func BenchmarkICRCFromPrefix(b *testing.B) {
	p := Packet{Opcode: UDSendOnlyWithImm, DestQP: 0x123, QKey: 1, SrcQP: 2, Imm: 3}
	buf := make([]byte, p.Len())
	p.Encode(buf)
	f := Flow{Src: [4]byte{127, 0, 0, 1}, Dst: [4]byte{127, 0, 0, 1}, SrcPort: 1, DstPort: 2, FlagsFrag: 0x4000}
	pre := f.Prefix(len(buf))
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		_ = ICRCFrom(pre, buf)
	}
}
