package rocev2

import (
	"math/rand/v2"
	"testing"
)

// TestPrefixTable: the table's prefix is Flow.Prefix's for every source
// address and port, for flows and lengths of several kinds.
func TestPrefixTable(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, c := range []struct {
		f Flow
		n int
	}{
		{Flow{Dst: [4]byte{198, 51, 100, 1}, DstPort: 4791, FlagsFrag: 0x4000}, UDImmLen},
		{Flow{Dst: [4]byte{127, 0, 0, 1}, DstPort: 20001, FlagsFrag: 0x4000}, 36},
		{Flow{Dst: [4]byte{10, 0, 0, 9}, DstPort: 4791, ID: 7, IHLVersion: 0x45}, 1024},
	} {
		var tab PrefixTable
		tab.Set(c.f, c.n)
		if !tab.For(c.f.Dst, c.f.DstPort, c.n) || tab.For(c.f.Dst, c.f.DstPort, c.n+1) ||
			tab.For(c.f.Dst, c.f.DstPort+1, c.n) || tab.For([4]byte{1, 2, 3, 4}, c.f.DstPort, c.n) {
			t.Fatalf("For: wrong destinations or lengths")
		}
		for i := 0; i < 10000; i++ {
			f := c.f
			f.Src = [4]byte{byte(rng.Uint32()), byte(rng.Uint32()), byte(rng.Uint32()), byte(rng.Uint32())}
			f.SrcPort = uint16(rng.Uint32())
			if i == 0 {
				f.Src, f.SrcPort = [4]byte{255, 255, 255, 255}, 0xffff
			}
			if got, want := tab.Prefix(f.Src, f.SrcPort), f.Prefix(c.n); got != want {
				t.Fatalf("flow %+v, n %d: table %#08x, Prefix %#08x", f, c.n, got, want)
			}
		}
	}
}

// BenchmarkPrefix compares a new flow's prefix from the CRC with the
// table's.
func BenchmarkPrefix(b *testing.B) {
	f := Flow{Dst: [4]byte{198, 51, 100, 1}, DstPort: 4791, FlagsFrag: 0x4000}
	b.Run("crc", func(b *testing.B) {
		var x uint32
		for i := 0; b.Loop(); i++ {
			f.Src[3], f.SrcPort = byte(i), uint16(i)
			x ^= f.Prefix(UDImmLen)
		}
		sink = x
	})
	b.Run("table", func(b *testing.B) {
		var tab PrefixTable
		tab.Set(f, UDImmLen)
		var x uint32
		for i := 0; b.Loop(); i++ {
			x ^= tab.Prefix([4]byte{198, 51, 100, byte(i)}, uint16(i))
		}
		sink = x
	})
}

var sink uint32
