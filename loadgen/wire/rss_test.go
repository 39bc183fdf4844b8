//go:build linux

package wire

import "testing"

func TestParseRSS(t *testing.T) {
	got, err := parseRSS([]byte("Name:\tseqd\nVmPeak:\t  9000 kB\nVmRSS:\t    1234 kB\nThreads:\t7\n"))
	if err != nil || got != 1234<<10 {
		t.Fatalf("parseRSS = %d, %v; want %d", got, err, 1234<<10)
	}
	if _, err := parseRSS([]byte("Name:\tkthread\n")); err == nil {
		t.Fatal("no VmRSS line: no error")
	}
	if n, err := ReadRSS(0); err != nil || n <= 0 {
		t.Fatalf("ReadRSS(self) = %d, %v", n, err)
	}
}
