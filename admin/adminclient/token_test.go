package adminclient

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestReadTokensModes: a token file is private to its owner (0600), or,
// owned by root, readable by its group at most: the file a Kubernetes
// Secret volume with fsGroup gives a pod (root:fsGroup 0440).
func TestReadTokensModes(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to own files as root and as another user")
	}
	for _, tc := range []struct {
		name string
		mode os.FileMode
		uid  int
		ok   bool
	}{
		{"0600 own", 0o600, 0, true},
		{"0400 own", 0o400, 0, true},
		{"0440 root-owned (Secret with fsGroup)", 0o440, 0, true},
		{"0640 root-owned", 0o640, 0, true},
		{"0660 root-owned: group-writable", 0o660, 0, false},
		{"0444 root-owned: world-readable", 0o444, 0, false},
		{"0440 owned by another user", 0o440, 10001, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := filepath.Join(t.TempDir(), "tokens")
			if err := os.WriteFile(f, []byte("a-token-of-at-least-16-chars\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(f, tc.uid, 10001); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(f, tc.mode); err != nil {
				t.Fatal(err)
			}
			toks, err := ReadTokens(f)
			if tc.ok != (err == nil) || (err != nil && !errors.Is(err, ErrTokenFile)) {
				t.Fatalf("ReadTokens(mode %v, uid %d) = %v, %v; want ok %v", tc.mode, tc.uid, toks, err, tc.ok)
			}
		})
	}
}
