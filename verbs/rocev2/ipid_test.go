package rocev2

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"
)

// TestIDTerms checks the ID algebra against the full ICRC: for packets of
// several lengths and random IDs, the ICRC with ID id is the ICRC with ID
// 0 XOR Term(id), and Solve recovers id from the two.
func TestIDTerms(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	f := Flow{Src: [4]byte{10, 0, 0, 1}, Dst: [4]byte{10, 0, 0, 2}, SrcPort: 50000, DstPort: 4791, FlagsFrag: 0x4000}
	for _, n := range []int{UDImmLen, 32, 64, 100, 1500, 4096 + 32} {
		pkt := make([]byte, n)
		for i := range pkt {
			pkt[i] = byte(r.Uint32())
		}
		var terms IDTerms
		terms.Set(n)
		f.ID = 0
		sum0 := ICRC(&f, pkt)
		for range 200 {
			id := uint16(r.Uint32())
			f.ID = id
			want := ICRC(&f, pkt)
			if got := sum0 ^ terms.Term(id); got != want {
				t.Fatalf("n=%d id=%#x: ICRC(0)^Term = %#x, ICRC(id) = %#x", n, id, got, want)
			}
			got, ok := terms.Solve(sum0, want)
			if !ok || got != id {
				t.Fatalf("n=%d: Solve = %#x, %v, want %#x", n, got, ok, id)
			}
		}
		// A flipped payload bit is no ID change: Solve refuses it (a
		// 2^-16 chance per random corruption; this one is fixed).
		f.ID = 7
		want := ICRC(&f, pkt)
		if _, ok := terms.Solve(sum0, want^1); ok {
			t.Errorf("n=%d: a one-bit ICRC error solved to an ID", n)
		}
	}
}

// TestIDTermsNext: Next steps Term from one ID to the next, for every ID
// (the last wraps to 0), as the full ICRC does.
func TestIDTermsNext(t *testing.T) {
	for _, n := range []int{UDImmLen, 100} {
		var terms IDTerms
		terms.Set(n)
		term := terms.Term(0)
		for id := 0; id <= 0xffff; id++ {
			next := terms.Next(uint16(id), term)
			if want := terms.Term(uint16(id + 1)); next != want {
				t.Fatalf("n=%d: Next(%#x) = %#x, Term(%#x) = %#x", n, id, next, uint16(id+1), want)
			}
			term = next
		}
	}
	// Against the full ICRC, across a run of consecutive IDs.
	f := Flow{Src: [4]byte{10, 0, 0, 1}, Dst: [4]byte{10, 0, 0, 2}, SrcPort: 50000, DstPort: 4791, FlagsFrag: 0x4000}
	pkt := make([]byte, UDImmLen)
	var terms IDTerms
	terms.Set(len(pkt))
	sum0 := ICRC(&f, pkt)
	term := terms.Term(0xfff0)
	for id := uint16(0xfff0); id != 0x10; id++ {
		f.ID = id
		if got := sum0 ^ term; got != ICRC(&f, pkt) {
			t.Fatalf("id %#x: stepped term gives %#x, ICRC %#x", id, got, ICRC(&f, pkt))
		}
		term = terms.Next(id, term)
	}
}

// TestScapyVectorIDs: the scapy packets carry IDs 0x1234, 1, 2 and 3. A
// receiver that cannot see the ID computes the ICRC for ID 0; Solve finds
// each vector's real ID from the difference.
func TestScapyVectorIDs(t *testing.T) {
	vecs := loadVectors(t)
	for name, want := range map[string]uint16{"ud_send_imm_header_only": 0x1234, "uc_rdma_write_only": 1,
		"rc_fetch_add": 2, "rc_atomic_ack": 3} {
		raw := vecs[name]
		var fr Frame
		if err := DecodeFrame(raw, &fr); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		pkt := raw[IPv4HeaderLen+UDPHeaderLen:]
		f := fr.Flow
		f.ID = 0
		var terms IDTerms
		terms.Set(len(pkt))
		id, ok := terms.Solve(ICRC(&f, pkt), binary.LittleEndian.Uint32(pkt[len(pkt)-ICRCLen:]))
		if !ok || id != want {
			t.Errorf("%s: solved ID %#x (%v), want %#x", name, id, ok, want)
		}
		if id, ok := VerifyICRCAnyID(&fr.Flow, pkt); !ok || id != want {
			t.Errorf("%s: VerifyICRCAnyID = %#x, %v; want %#x", name, id, ok, want)
		}
	}
}

func BenchmarkIDTermsSet(b *testing.B) {
	var terms IDTerms
	for i := 0; i < b.N; i++ {
		terms.Set(UDImmLen + i&1)
	}
}
