package adminclient

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"

	"google.golang.org/grpc/credentials"
)

// ErrTLS reports unusable TLS material.
var ErrTLS = errors.New("admin: tls")

// TLSConfig names the files of the admin plane's TLS. Paths are PEM.
type TLSConfig struct {
	// CertFile and KeyFile are this side's certificate and key. Required
	// on the server; on a client they enable mTLS.
	CertFile, KeyFile string
	// CAFile verifies the other side: on the server, client certificates
	// (mTLS: a client that presents one must chain to it); on a client,
	// the server (default: the system roots).
	CAFile string
	// RequireClientCert makes the server refuse TLS handshakes without a
	// verified client certificate. Otherwise a certificate is optional and
	// a bearer token can authorise instead.
	RequireClientCert bool
	// ServerName overrides the name a client verifies.
	ServerName string
}

// LoadPool reads a PEM CA file into a pool (ServerTLS and ClientTLS).
func LoadPool(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("%w: CA file: %v", ErrTLS, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%w: CA file %s holds no PEM certificate", ErrTLS, file)
	}
	return pool, nil
}

// ClientTLS builds a client's transport credentials: the server verified
// against CAFile (or the system roots), and a client certificate when
// CertFile and KeyFile are set.
func ClientTLS(c TLSConfig) (credentials.TransportCredentials, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.ServerName}
	if c.CAFile != "" {
		pool, err := LoadPool(c.CAFile)
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = pool
	}
	if (c.CertFile == "") != (c.KeyFile == "") {
		return nil, fmt.Errorf("%w: client certificate and key go together", ErrTLS)
	}
	if c.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("%w: client key pair: %v", ErrTLS, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return credentials.NewTLS(cfg), nil
}
