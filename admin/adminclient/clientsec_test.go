package adminclient

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestClientSecurityDialOptions(t *testing.T) {
	tok := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tok, []byte("client-security-test-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		s       ClientSecurity
		n       int
		wantErr error
	}{
		{"none", ClientSecurity{}, 0, nil},
		{"insecure", ClientSecurity{Insecure: true}, 1, nil},
		{"insecure token", ClientSecurity{Insecure: true, TokenFile: tok}, 2, nil},
		{"insecure and tls", ClientSecurity{Insecure: true, CAFile: "ca.pem"}, 0, ErrSecurityFlags},
		{"cert without key", ClientSecurity{CertFile: "c.pem"}, 0, ErrSecurityFlags},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts, err := tc.s.DialOptions()
			if !errors.Is(err, tc.wantErr) || len(opts) != tc.n {
				t.Fatalf("DialOptions = %d options, %v; want %d, %v", len(opts), err, tc.n, tc.wantErr)
			}
		})
	}
}

// Dial refuses plaintext off loopback before connecting (nothing is
// sent), and says what to pass; loopback is not refused.
func TestDialPlaintextRefused(t *testing.T) {
	ctx := context.Background()
	_, err := Dial(ctx, "198.51.100.1:7070")
	if !errors.Is(err, ErrPlaintextRefused) {
		t.Fatalf("Dial = %v, want ErrPlaintextRefused", err)
	}
	for _, want := range []string{"-insecure", "client.WithInsecure()", "-tls-ca"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not name %s", err, want)
		}
	}
	if _, err := Dial(ctx, "127.0.0.1:1"); errors.Is(err, ErrPlaintextRefused) {
		t.Errorf("loopback: %v", err)
	}
}
