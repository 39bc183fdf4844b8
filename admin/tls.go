package admin

import (
	"crypto/tls"
	"fmt"

	"google.golang.org/grpc/credentials"

	"github.com/seqd/seqd/admin/adminclient"
)

// TLS material: defined in adminclient, which clients import.
var ErrTLS = adminclient.ErrTLS

// TLSConfig names the files of the admin plane's TLS (adminclient.TLSConfig).
type TLSConfig = adminclient.TLSConfig

// ServerTLS builds the server's transport credentials: TLS 1.2 or later,
// and client certificates verified against CAFile when it is set.
func ServerTLS(c TLSConfig) (credentials.TransportCredentials, error) {
	if c.CertFile == "" || c.KeyFile == "" {
		return nil, fmt.Errorf("%w: the server needs a certificate and a key", ErrTLS)
	}
	cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("%w: server key pair: %v", ErrTLS, err)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}
	switch {
	case c.CAFile != "":
		if cfg.ClientCAs, err = adminclient.LoadPool(c.CAFile); err != nil {
			return nil, err
		}
		cfg.ClientAuth = tls.VerifyClientCertIfGiven
		if c.RequireClientCert {
			cfg.ClientAuth = tls.RequireAndVerifyClientCert
		}
	case c.RequireClientCert:
		return nil, fmt.Errorf("%w: requiring client certificates needs a CA file", ErrTLS)
	}
	return credentials.NewTLS(cfg), nil
}
