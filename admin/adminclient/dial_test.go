package adminclient

import "testing"

func TestDefaultCreds(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:7070": true,
		"127.0.0.9:7070": true,
		"[::1]:7070":     true,
		"localhost:7070": true,
		"10.0.0.1:7070":  false,
		"seqd:7070":      false,
		"[::]:7070":      false,
		"nonsense":       false,
	} {
		if got := defaultCreds(addr) != nil; got != want {
			t.Errorf("defaultCreds(%q) set = %v, want %v", addr, got, want)
		}
	}
}
