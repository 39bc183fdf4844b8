package rocev2

import (
	"encoding/binary"
	"hash/crc32"
)

// crcTables are slicing-by-8 tables for CRC-32 (IEEE). hash/crc32 computes
// the same function, but through a function variable, which makes every
// buffer passed to it escape to the heap: on a path that computes an ICRC
// per packet that is an allocation per packet. This small kernel keeps the
// stack buffers on the stack; TestCRCMatchesStdlib checks it against
// hash/crc32.
var crcTables = func() (t [8][256]uint32) {
	t[0] = *crc32.IEEETable
	for i := 0; i < 256; i++ {
		c := t[0][i]
		for j := 1; j < 8; j++ {
			c = t[0][c&0xff] ^ c>>8
			t[j][i] = c
		}
	}
	return t
}()

// crcUpdate continues a CRC-32 (IEEE) with p; crc is in final (xored)
// form, as crc32.Update takes it.
func crcUpdate(crc uint32, p []byte) uint32 {
	crc = ^crc
	t := &crcTables
	for len(p) >= 8 {
		lo := binary.LittleEndian.Uint32(p) ^ crc
		hi := binary.LittleEndian.Uint32(p[4:])
		crc = t[7][lo&0xff] ^ t[6][lo>>8&0xff] ^ t[5][lo>>16&0xff] ^ t[4][lo>>24] ^
			t[3][hi&0xff] ^ t[2][hi>>8&0xff] ^ t[1][hi>>16&0xff] ^ t[0][hi>>24]
		p = p[8:]
	}
	for _, v := range p {
		crc = t[0][byte(crc)^v] ^ crc>>8
	}
	return ^crc
}
