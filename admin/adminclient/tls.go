package adminclient

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"sync/atomic"

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
// CertFile and KeyFile are set. They never change; NewClientTLS's can be
// reloaded.
func ClientTLS(c TLSConfig) (credentials.TransportCredentials, error) {
	cfg, err := clientConfig(c)
	if err != nil {
		return nil, err
	}
	return credentials.NewTLS(cfg), nil
}

func clientConfig(c TLSConfig) (*tls.Config, error) {
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
	return cfg, nil
}

// ClientCreds are a long-running client's TLS credentials (seqd-pd's),
// re-read from their files by Reload: every handshake after a Reload
// verifies the server against the new CA and presents the new client
// certificate. Connections already open keep theirs.
type ClientCreds struct {
	*clientCreds
}

type clientCreds struct {
	files TLSConfig
	cur   atomic.Pointer[credentials.TransportCredentials]
}

var _ credentials.TransportCredentials = ClientCreds{}

// NewClientTLS reads the CA and the client key pair from the files of c.
func NewClientTLS(c TLSConfig) (ClientCreds, error) {
	cc := ClientCreds{&clientCreds{files: c}}
	if err := cc.Reload(); err != nil {
		return ClientCreds{}, err
	}
	return cc, nil
}

// Reload re-reads the files; on an error the credentials in use stay.
func (c ClientCreds) Reload() error {
	cfg, err := clientConfig(c.files)
	if err != nil {
		return err
	}
	tc := credentials.NewTLS(cfg)
	c.cur.Store(&tc)
	return nil
}

// Name names the secret for reload logs and metrics.
func (c ClientCreds) Name() string { return "tls" }

// Files are the files Reload reads.
func (c ClientCreds) Files() []string {
	var f []string
	for _, p := range []string{c.files.CAFile, c.files.CertFile, c.files.KeyFile} {
		if p != "" {
			f = append(f, p)
		}
	}
	return f
}

func (c ClientCreds) now() credentials.TransportCredentials { return *c.cur.Load() }

// ClientHandshake handshakes with the credentials in force.
func (c ClientCreds) ClientHandshake(ctx context.Context, authority string, conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return c.now().ClientHandshake(ctx, authority, conn)
}

// ServerHandshake is not for clients; it is the TLS credentials'.
func (c ClientCreds) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return c.now().ServerHandshake(conn)
}

// Info is the TLS credentials' protocol information.
func (c ClientCreds) Info() credentials.ProtocolInfo { return c.now().Info() }

// Clone returns c: the clone follows the same files and reloads.
func (c ClientCreds) Clone() credentials.TransportCredentials { return c }

// OverrideServerName is deprecated in gRPC and not supported.
func (c ClientCreds) OverrideServerName(string) error {
	return fmt.Errorf("%w: OverrideServerName: set TLSConfig.ServerName", ErrTLS)
}
