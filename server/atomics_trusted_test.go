package server

import (
	"errors"
	"slices"
	"testing"
)

// TestAtomicsTrusted: -atomics-trusted is a comma-separated list of
// client-certificate identities, so it needs -admin-client-ca to verify
// them.
func TestAtomicsTrusted(t *testing.T) {
	s := SecurityConfig{AtomicsTrusted: " seq-client, ,spiffe://seq/x "}
	if got, want := s.atomicsTrusted(), []string{"seq-client", "spiffe://seq/x"}; !slices.Equal(got, want) {
		t.Errorf("atomicsTrusted = %q, want %q", got, want)
	}
	c := Config{Security: s}
	if _, _, err := c.adminSecurity(quiet); !errors.Is(err, ErrConfig) {
		t.Errorf("-atomics-trusted without -admin-client-ca: %v, want %v", err, ErrConfig)
	}
}
