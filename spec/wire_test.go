package spec

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash/crc32"
	"net/netip"
	"strings"
	"testing"

	"github.com/seqd/seqd/verbs"
	"github.com/seqd/seqd/verbs/rocev2"
)

// The wire rules of PROTOCOL.md ("Wire rules"), as golden vectors: the
// binary form of an address, and whole IPv4/UDP/RoCEv2 frames of a
// request, a confirmation and a full answer, field by field, with their
// ICRC. Each frame is built by the real encoders the userspace provider
// sends with (rocev2.UDImmICRC.Put for header-only packets, the general
// Packet encoder and PutICRC for the full answer) and by AppendFrame, and
// the test checks that they agree byte for byte before it compares with
// testdata/wire.golden (go test ./spec -update rewrites it).

// wireFlow is one direction of the example conversation: client
// 10.0.0.1:49152 QPN 0x000011, server request QP 0x000002 and response QP
// 0x000003 at 10.0.0.2:4791.
var (
	wireClient = verbs.Address{GID: verbs.GIDFromAddr(netip.MustParseAddr("10.0.0.1")), Port: 49152}
	wireServer = verbs.Address{GID: verbs.GIDFromAddr(netip.MustParseAddr("10.0.0.2")), Port: 4791}
)

const (
	wireClientQPN = 0x000011
	wireReqQPN    = 0x000002
	wireRespQPN   = 0x000003
	wireQKey      = 0x1234abcd
)

func flowOf(src, dst verbs.Address) rocev2.Flow {
	return rocev2.Flow{Src: src.GID.Addr().As4(), Dst: dst.GID.Addr().As4(), SrcPort: src.Port, DstPort: dst.Port,
		ID: 0, FlagsFrag: 0x4000}
}

// wirePacket encodes one Spec-S0 packet as the userspace provider does
// and returns the whole frame (IPv4 header first, TOS 0, TTL 64, UDP
// checksum 0), checking the encoders against each other.
func wirePacket(t *testing.T, src, dst verbs.Address, destQP, psn, srcQP uint32, imm Imm, payload []byte) (frame, transport []byte) {
	t.Helper()
	f := flowOf(src, dst)
	pk := rocev2.Packet{Opcode: rocev2.UDSendOnlyWithImm, PKey: rocev2.DefaultPKey, DestQP: destQP, PSN: psn,
		QKey: wireQKey, SrcQP: srcQP, Imm: uint32(imm), Payload: payload}
	frame, err := rocev2.AppendFrame(nil, &rocev2.Frame{TTL: 64, Flow: f, Packet: pk})
	if err != nil {
		t.Fatal(err)
	}
	transport = frame[rocev2.IPv4HeaderLen+rocev2.UDPHeaderLen:]
	// The provider's own paths.
	got := make([]byte, len(transport))
	if len(payload) == 0 {
		var u rocev2.UDImmICRC
		u.Put(got, f.Prefix(rocev2.UDImmLen), destQP, psn, wireQKey, srcQP, uint32(imm))
	} else {
		hl := pk.EncodeHeaders(got, 0)
		copy(got[hl:], payload)
		rocev2.PutICRC(&f, got)
	}
	if !bytes.Equal(got, transport) {
		t.Fatalf("provider encoder %x, AppendFrame %x", got, transport)
	}
	// A receiver that assumes IPv4 ID 0 (it cannot see the IP header)
	// verifies it; a sender that put any other ID on the wire fails.
	if !rocev2.VerifyICRC(&f, transport) {
		t.Fatal("ICRC does not verify")
	}
	other := f
	other.ID = 0x1234
	if rocev2.VerifyICRC(&other, transport) {
		t.Fatal("ICRC verifies with IPv4 ID 0x1234 too: the ID is not covered")
	}
	var back rocev2.Packet
	if err := back.Decode(transport); err != nil {
		t.Fatal(err)
	}
	if got, want := icrcAsWritten(frame), binary.LittleEndian.Uint32(frame[len(frame)-4:]); got != want {
		t.Fatalf("ICRC by PROTOCOL.md's recipe 0x%08x, encoder 0x%08x", got, want)
	}
	return frame, transport
}

// icrcAsWritten computes a frame's ICRC from PROTOCOL.md's text alone,
// with hash/crc32: 8 bytes of ones, the IPv4 header with TOS, TTL and
// checksum as ones, the UDP header with its checksum as ones, the BTH with
// byte 4 as ones, then the rest up to the ICRC.
func icrcAsWritten(frame []byte) uint32 {
	b := append(bytes.Repeat([]byte{0xff}, 8), frame[:len(frame)-4]...)
	ip, udp, bth := b[8:], b[8+20:], b[8+28:]
	ip[1], ip[8], ip[10], ip[11] = 0xff, 0xff, 0xff, 0xff
	udp[6], udp[7] = 0xff, 0xff
	bth[4] = 0xff
	return crc32.ChecksumIEEE(b)
}

// describe prints a transport packet field by field.
func describe(b []byte) string {
	var s strings.Builder
	fmt.Fprintf(&s, "bth=%x [opcode=0x%02x flags=0x%02x pkey=0x%04x resv8=0x%02x destqp=0x%06x ackreq/resv=0x%02x psn=0x%06x]",
		b[:12], b[0], b[1], binary.BigEndian.Uint16(b[2:]), b[4], binary.BigEndian.Uint32(b[4:])&0xffffff, b[8],
		binary.BigEndian.Uint32(b[8:])&0xffffff)
	fmt.Fprintf(&s, " deth=%x [qkey=0x%08x srcqp=0x%06x] immdt=%x", b[12:20], binary.BigEndian.Uint32(b[12:]),
		binary.BigEndian.Uint32(b[16:])&0xffffff, b[20:24])
	if p := b[24 : len(b)-4]; len(p) > 0 {
		fmt.Fprintf(&s, " payload=%x", p)
	}
	fmt.Fprintf(&s, " icrc=%x (crc32 0x%08x, stored little endian)", b[len(b)-4:], binary.LittleEndian.Uint32(b[len(b)-4:]))
	return s.String()
}

func TestGoldenWire(t *testing.T) {
	var b strings.Builder
	line := func(name, format string, a ...any) { fmt.Fprintf(&b, "%s: %s\n", name, fmt.Sprintf(format, a...)) }
	for _, c := range []struct {
		name string
		a    verbs.Address
	}{
		{"addr-client", wireClient},
		{"addr-server", wireServer},
		{"addr-loopback-port0", verbs.Address{GID: verbs.GIDFromAddr(netip.MustParseAddr("127.0.0.1"))}},
	} {
		bin, _ := c.a.MarshalBinary()
		var back verbs.Address
		if err := back.UnmarshalBinary(bin); err != nil || back != c.a {
			t.Fatalf("%s: round trip %v, %v", c.name, back, err)
		}
		line(c.name, "%s -> gid=%x lid=%x port=%x (%d bytes)", c.a, bin[:16], bin[16:18], bin[18:20], len(bin))
	}

	const v = uint64(0x0650_7ca5_f000_0001) // hybrid 2025-01-01T00:00:00.000Z, logical 1
	req, err := RequestImm(7, GuessOf(v>>LowBits))
	if err != nil {
		t.Fatal(err)
	}
	frame, tp := wirePacket(t, wireClient, wireServer, wireReqQPN, 5, wireClientQPN, req, nil)
	line("request", "%s -> %s", describe(tp), hex.EncodeToString(frame))
	frame, tp = wirePacket(t, wireServer, wireClient, wireClientQPN, 0, wireRespQPN, AnswerImm(7, v), nil)
	line("confirm", "%s -> %s", describe(tp), hex.EncodeToString(frame))
	full := make([]byte, FullLen)
	PutFull(full, v)
	frame, tp = wirePacket(t, wireServer, wireClient, wireClientQPN, 1, wireRespQPN, AnswerImm(8, v), full)
	line("full", "%s -> %s", describe(tp), hex.EncodeToString(frame))
	noGuess, _ := RequestImm(9, NoGuess)
	frame, tp = wirePacket(t, wireClient, wireServer, wireReqQPN, 6, wireClientQPN, noGuess, nil)
	line("request-noguess", "%s -> %s", describe(tp), hex.EncodeToString(frame))
	// A high part whose low 20 bits are all ones guesses as NoGuess: it is
	// never confirmed, so values under it always come as full answers.
	h := uint64(0xabc_fffff)
	line("unguessable-high", "high=0x%x -> guess=%v (NoGuess: %v) confirms(value 0x%x)=%v", h, GuessOf(h), GuessOf(h) == NoGuess,
		h<<LowBits|5, Confirms(GuessOf(h), h<<LowBits|5))

	checkGolden(t, "wire.golden", "wire vectors", b.String())
}
