package admin

import (
	"crypto/tls"
	"fmt"
	"sync/atomic"

	"google.golang.org/grpc/credentials"

	"github.com/seqd/seqd/admin/adminclient"
)

// TLS material: defined in adminclient, which clients import.
var ErrTLS = adminclient.ErrTLS

// TLSConfig names the files of the admin plane's TLS (adminclient.TLSConfig).
type TLSConfig = adminclient.TLSConfig

// ServerTLS builds the server's transport credentials: TLS 1.2 or later,
// and client certificates verified against CAFile when it is set. They
// are a *ServerCreds, which Reload re-reads from the files.
func ServerTLS(c TLSConfig) (credentials.TransportCredentials, error) {
	s, err := NewServerTLS(c)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// ServerCreds are the admin server's TLS credentials (grpc.Creds), re-read
// from their files by Reload: every handshake after a Reload presents the
// new certificate and verifies clients against the new CA; connections
// already open keep the ones they were made with.
type ServerCreds struct {
	credentials.TransportCredentials // TLS; each handshake takes the configuration in force
	files                            TLSConfig
	cur                              atomic.Pointer[tls.Config]
}

// NewServerTLS reads the server's key pair (and client CA) from the files
// of c.
func NewServerTLS(c TLSConfig) (*ServerCreds, error) {
	if c.CertFile == "" || c.KeyFile == "" {
		return nil, fmt.Errorf("%w: the server needs a certificate and a key", ErrTLS)
	}
	if c.RequireClientCert && c.CAFile == "" {
		return nil, fmt.Errorf("%w: requiring client certificates needs a CA file", ErrTLS)
	}
	s := &ServerCreds{files: c}
	if err := s.Reload(); err != nil {
		return nil, err
	}
	s.TransportCredentials = credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) { return s.cur.Load(), nil }})
	return s, nil
}

// Reload re-reads the certificate, key and CA files. Only when all of
// them read and the key matches the certificate does it put them in
// force; otherwise it returns the error and the old ones stay.
func (s *ServerCreds) Reload() error {
	c := s.files
	cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
	if err != nil {
		return fmt.Errorf("%w: server key pair: %v", ErrTLS, err)
	}
	// NextProtos: gRPC clients require ALPN h2, and the config a
	// handshake uses is this one, not the one credentials.NewTLS fixed.
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2"}}
	if c.CAFile != "" {
		if cfg.ClientCAs, err = adminclient.LoadPool(c.CAFile); err != nil {
			return err
		}
		cfg.ClientAuth = tls.VerifyClientCertIfGiven
		if c.RequireClientCert {
			cfg.ClientAuth = tls.RequireAndVerifyClientCert
		}
	}
	s.cur.Store(cfg)
	return nil
}

// Name names the secret for reload logs and metrics.
func (s *ServerCreds) Name() string { return "tls" }

// Files are the files Reload reads.
func (s *ServerCreds) Files() []string {
	f := []string{s.files.CertFile, s.files.KeyFile}
	if s.files.CAFile != "" {
		f = append(f, s.files.CAFile)
	}
	return f
}
