package soft

import (
	"encoding/binary"
	"testing"

	"github.com/seqd/seqd/verbs/rocev2"
)

// ethernet puts an Ethernet header (IPv4) before an IPv4 packet.
func ethernet(ipPkt []byte) []byte {
	eth := []byte{2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00}
	return append(eth, ipPkt...)
}

// rxICRCOK checks pkt's ICRC as the AF_XDP receive path does: the ICRC
// for ID 0 from the flow's prefix, and the ID's term from the header.
func rxICRCOK(h *frameHdr, pkt []byte) bool {
	f := rocev2.Flow{Src: h.src, Dst: h.dst, SrcPort: h.sport, DstPort: h.dport, FlagsFrag: 0x4000}
	var ids rocev2.IDTerms
	ids.Set(len(pkt))
	var next uint16
	var term uint32
	sum0 := rocev2.ICRCFrom(f.Prefix(len(pkt)), pkt)
	return frameICRCOK(&ids, &next, &term, sum0, binary.LittleEndian.Uint32(pkt[len(pkt)-4:]), h.id)
}

// TestFrameScapyVectors: scapy's packets, in Ethernet frames, pass the
// frame parser, which reads their addresses, ports and IPv4 IDs
// (0x1234, 1, 2, 3), and their ICRCs check over the real IPv4 header;
// the same packet with another ID in its header, or one payload bit
// flipped, fails.
func TestFrameScapyVectors(t *testing.T) {
	wantID := map[string]uint16{"ud_send_imm_header_only": 0x1234, "uc_rdma_write_only": 1, "rc_fetch_add": 2, "rc_atomic_ack": 3}
	for name, v := range scapyVectors(t) {
		t.Run(name, func(t *testing.T) {
			fr := ethernet(v)
			var h frameHdr
			pkt, e := parseFrame(fr, &h)
			if e != frameOK {
				t.Fatalf("parseFrame: %d", e)
			}
			if h.id != wantID[name] || h.dport != 4791 || h.flagsFrag != 0x4000 || h.udpPartial {
				t.Fatalf("header %+v", h)
			}
			var p rocev2.Packet
			if err := p.Decode(pkt); err != nil {
				t.Fatalf("decode: %v", err)
			}
			if !rxICRCOK(&h, pkt) {
				t.Fatal("ICRC over the real IPv4 header does not check")
			}
			h2 := h
			h2.id ^= 0x0100
			if rxICRCOK(&h2, pkt) {
				t.Fatal("ICRC checks for another IPv4 ID")
			}
			pkt[len(pkt)-5] ^= 1
			if rxICRCOK(&h, pkt) {
				t.Fatal("ICRC checks with a payload bit flipped")
			}
		})
	}
}

// frameOf builds a frame for a header-only UD SEND_WITH_IMM with the
// given IPv4 ID and UDP checksum (0: none; 1: compute it).
func frameOf(t testing.TB, id, udpCk uint16) []byte {
	t.Helper()
	fr := rocev2.Frame{TTL: 64, Flow: rocev2.Flow{Src: [4]byte{198, 51, 100, 1}, Dst: [4]byte{198, 51, 100, 2},
		SrcPort: 50000, DstPort: 4791, ID: id, FlagsFrag: 0x4000},
		Packet: rocev2.Packet{Opcode: rocev2.UDSendOnlyWithImm, PKey: 0xffff, DestQP: 0x101, PSN: 9, QKey: 7, SrcQP: 0x102, Imm: 42}}
	b, err := rocev2.AppendFrame(nil, &fr)
	if err != nil {
		t.Fatal(err)
	}
	f := ethernet(b)
	if udpCk == 1 {
		udp := f[frameEthLen+20:]
		ps := sum16(f[frameEthLen+12:frameEthLen+20], 17+uint64(len(udp)))
		binary.BigEndian.PutUint16(udp[6:], ^fold(sum16(udp, ps)))
	}
	return f
}

// TestParseFrame: what the parser accepts (UDP checksum absent, right,
// or the pseudo-header's sum a local sender leaves to offload; Ethernet
// padding) and what it refuses, and why.
func TestParseFrame(t *testing.T) {
	var h frameHdr
	good := frameOf(t, 5, 0)
	if pkt, e := parseFrame(good, &h); e != frameOK || len(pkt) != rocev2.UDImmLen || !rxICRCOK(&h, pkt) {
		t.Fatalf("good frame: %d, %d bytes", e, len(pkt))
	}
	full := frameOf(t, 5, 1)
	if _, e := parseFrame(full, &h); e != frameOK || h.udpPartial {
		t.Fatalf("frame with a UDP checksum: %d, partial %v", e, h.udpPartial)
	}
	partial := frameOf(t, 5, 0)
	udp := partial[frameEthLen+20:]
	binary.BigEndian.PutUint16(udp[6:], fold(sum16(partial[frameEthLen+12:frameEthLen+20], 17+uint64(len(udp)))))
	if _, e := parseFrame(partial, &h); e != frameOK || !h.udpPartial {
		t.Fatalf("frame with a partial UDP checksum: %d, partial %v", e, h.udpPartial)
	}
	if pkt, e := parseFrame(append(frameOf(t, 5, 0), 0, 0, 0, 0), &h); e != frameOK || len(pkt) != rocev2.UDImmLen {
		t.Fatalf("padded frame: %d, %d bytes", e, len(pkt))
	}
	for _, tc := range []struct {
		name string
		mut  func(b []byte) []byte
		want frameErr
	}{
		{"short", func(b []byte) []byte { return b[:frameHdrsLen-1] }, frameLength},
		{"ARP", func(b []byte) []byte { b[13] = 0x06; return b }, frameNotRoCE},
		{"IPv4 options", func(b []byte) []byte { b[14] = 0x46; return b }, frameNotRoCE},
		{"TCP", func(b []byte) []byte { b[14+9] = 6; return b }, frameNotRoCE},
		{"more fragments", func(b []byte) []byte { b[14+6] |= 0x20; return b }, frameNotRoCE},
		{"fragment offset", func(b []byte) []byte { b[14+7] = 1; return b }, frameNotRoCE},
		{"IPv4 length past the frame", func(b []byte) []byte { return b[:len(b)-1] }, frameLength},
		{"IPv4 length below UDP", func(b []byte) []byte { binary.BigEndian.PutUint16(b[16:], 27); return b }, frameLength},
		{"UDP length", func(b []byte) []byte { b[14+20+5]--; return b }, frameLength},
		{"IPv4 checksum", func(b []byte) []byte { b[14+8]--; return b }, frameIPChecksum},
		{"UDP checksum", func(b []byte) []byte { b[14+20+7] ^= 1; return b }, frameUDPChecksum},
		{"payload under a UDP checksum", func(b []byte) []byte { b[len(b)-6] ^= 1; return b }, frameUDPChecksum},
	} {
		b := tc.mut(frameOf(t, 5, 1))
		if _, e := parseFrame(b, &h); e != tc.want {
			t.Errorf("%s: parseFrame = %d, want %d", tc.name, e, tc.want)
		}
	}
}

// FuzzParseFrame: no input panics the parser, and what it accepts has
// lengths that agree.
func FuzzParseFrame(f *testing.F) {
	f.Add(frameOf(f, 5, 0))
	f.Add(frameOf(f, 5, 1))
	f.Fuzz(func(t *testing.T, b []byte) {
		var h frameHdr
		pkt, e := parseFrame(b, &h)
		if e == frameOK && frameHdrsLen+len(pkt) > len(b) {
			t.Fatalf("payload of %d bytes from a %d-byte frame", len(pkt), len(b))
		}
	})
}

func BenchmarkParseFrame(b *testing.B) {
	fr := frameOf(b, 5, 1)
	var h frameHdr
	b.ReportAllocs()
	for b.Loop() {
		if _, e := parseFrame(fr, &h); e != frameOK {
			b.Fatal(e)
		}
	}
}
