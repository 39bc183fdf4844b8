package adminclient

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"

	"google.golang.org/grpc/credentials"
)

// ErrTokenFile reports an unusable token file.
var ErrTokenFile = errors.New("admin: token file")

// ReadTokens reads a token file: one token a line, # comments. It refuses a
// file others can read: it must be mode 0600 or stricter, or, owned by
// root, group-readable at most (0640, 0440: a Kubernetes Secret mounted
// with fsGroup, read by the pod's group).
func ReadTokens(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrTokenFile, err)
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Mode().Perm()&0o077 != 0 && (st.Mode().Perm()&0o037 != 0 || !ownedByRoot(st)) {
		return nil, fmt.Errorf("%w: %s is readable by others (mode %v); chmod 600 it", ErrTokenFile, path, st.Mode().Perm())
	}
	var toks []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if len(line) < 16 {
			return nil, fmt.Errorf("%w: %s: a token shorter than 16 characters", ErrTokenFile, path)
		}
		toks = append(toks, line)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrTokenFile, err)
	}
	if len(toks) == 0 {
		return nil, fmt.Errorf("%w: %s holds no token", ErrTokenFile, path)
	}
	return toks, nil
}

// BearerToken returns per-call credentials that send token. With
// insecure set they are sent over plaintext too: on loopback, or off it
// when the caller chose plaintext (Insecure).
func BearerToken(token string, insecure bool) credentials.PerRPCCredentials {
	return bearerCreds{token: token, insecure: insecure}
}

type bearerCreds struct {
	token    string
	insecure bool
}

func (b bearerCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + b.token}, nil
}

func (b bearerCreds) RequireTransportSecurity() bool { return !b.insecure }

// ReadTokenFile returns the first token of a token file, for clients.
func ReadTokenFile(path string) (string, error) {
	toks, err := ReadTokens(path)
	if err != nil {
		return "", err
	}
	return toks[0], nil
}

// TokenFile is a bearer token read from a file that Reload re-reads: the
// per-call credentials of a long-running client (seqd-pd), so that a
// rotated token is sent from the next call on without a restart.
type TokenFile struct {
	path     string
	insecure bool
	cur      atomic.Pointer[string]
}

// NewTokenFile reads the first token of path (ReadTokenFile). With
// insecure set it is sent over plaintext too (BearerToken).
func NewTokenFile(path string, insecure bool) (*TokenFile, error) {
	t := &TokenFile{path: path, insecure: insecure}
	if err := t.Reload(); err != nil {
		return nil, err
	}
	return t, nil
}

// Reload re-reads the file; on an error the token in use stays.
func (t *TokenFile) Reload() error {
	tok, err := ReadTokenFile(t.path)
	if err != nil {
		return err
	}
	t.cur.Store(&tok)
	return nil
}

// Name names the secret for reload logs and metrics.
func (t *TokenFile) Name() string { return "token" }

// Files is the token file.
func (t *TokenFile) Files() []string { return []string{t.path} }

// GetRequestMetadata sends the token in force.
func (t *TokenFile) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + *t.cur.Load()}, nil
}

// RequireTransportSecurity is as for BearerToken.
func (t *TokenFile) RequireTransportSecurity() bool { return !t.insecure }
