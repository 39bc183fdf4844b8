package adminclient

import (
	"errors"
	"flag"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// ErrPlaintextRefused: Dial would have spoken plaintext to an address off
// loopback without the caller choosing it. The error names what to pass.
var ErrPlaintextRefused = errors.New("admin: plaintext refused off loopback")

// ErrSecurityFlags: a bad combination of the client security flags.
var ErrSecurityFlags = errors.New("admin: bad security flags")

// Insecure is the dial option that chooses plaintext knowingly, off
// loopback too (client.WithInsecure, seqctl -insecure, loadgen -insecure).
func Insecure() grpc.DialOption {
	return grpc.WithTransportCredentials(insecure.NewCredentials())
}

// plaintextRefused is Dial's error for a plaintext dial of addr off
// loopback: it says what to pass, in the library and in each tool.
func plaintextRefused(addr string) error {
	return fmt.Errorf("%w: %s is not a loopback address, so the admin plane needs TLS or an explicit choice of plaintext: "+
		"for TLS pass -tls-ca FILE (seqctl, loadgen) or client.WithAdminDialOptions(grpc.WithTransportCredentials(creds)); "+
		"for plaintext pass -insecure (seqctl, loadgen) or client.WithInsecure()", ErrPlaintextRefused, addr)
}

// ClientSecurity is how a command-line client (seqctl, loadgen) reaches
// the admin plane: the same flags in both, registered by Register.
type ClientSecurity struct {
	TokenFile string // first token of the file: bearer token
	CAFile    string // verifies the server; turns TLS on
	CertFile  string // client certificate (mTLS); turns TLS on
	KeyFile   string
	Insecure  bool // plaintext off loopback, chosen knowingly
}

// Register adds -token-file, -tls-ca, -tls-cert, -tls-key and -insecure
// to fs.
func (s *ClientSecurity) Register(fs *flag.FlagSet) {
	fs.StringVar(&s.TokenFile, "token-file", "", "`file` whose first token is sent as the bearer token: it authorises mutating calls (set-mode, advance, transfer-leader) and, where seqd protects them, Connect and KeepAlive")
	fs.StringVar(&s.CAFile, "tls-ca", "", "CA `file` (PEM) that verifies the server; turns TLS on")
	fs.StringVar(&s.CertFile, "tls-cert", "", "client certificate `file` (PEM) for mTLS; turns TLS on")
	fs.StringVar(&s.KeyFile, "tls-key", "", "client key `file` (PEM) for mTLS")
	fs.BoolVar(&s.Insecure, "insecure", false, "plaintext admin plane (no TLS) even off loopback; a -token-file token is then sent in the clear")
}

// DialOptions turns s into dial options for Dial (and
// client.WithAdminDialOptions). Bad combinations wrap ErrSecurityFlags.
func (s *ClientSecurity) DialOptions() ([]grpc.DialOption, error) {
	opts, _, err := s.ReloadableDialOptions()
	return opts, err
}

// Reloader is a credential that Reload re-reads from its Files in place
// (TokenFile, ClientCreds).
type Reloader interface {
	Name() string
	Files() []string
	Reload() error
}

// ReloadableDialOptions is DialOptions for a long-running client: the
// token and the TLS files are re-read by the returned Reloaders' Reload
// (on SIGHUP or when the files change, see seqd-pd), and each later call
// or handshake uses what they read.
func (s *ClientSecurity) ReloadableDialOptions() ([]grpc.DialOption, []Reloader, error) {
	var opts []grpc.DialOption
	var rs []Reloader
	tlsOn := s.CAFile != "" || s.CertFile != "" || s.KeyFile != ""
	switch {
	case tlsOn && s.Insecure:
		return nil, nil, fmt.Errorf("%w: -insecure excludes -tls-ca, -tls-cert and -tls-key", ErrSecurityFlags)
	case (s.CertFile == "") != (s.KeyFile == ""):
		return nil, nil, fmt.Errorf("%w: -tls-cert and -tls-key go together", ErrSecurityFlags)
	case tlsOn:
		creds, err := NewClientTLS(TLSConfig{CAFile: s.CAFile, CertFile: s.CertFile, KeyFile: s.KeyFile})
		if err != nil {
			return nil, nil, err
		}
		opts = append(opts, grpc.WithTransportCredentials(creds))
		rs = append(rs, creds)
	case s.Insecure:
		opts = append(opts, Insecure())
	}
	if s.TokenFile != "" {
		// Without TLS the token goes over plaintext: on loopback, or
		// off it when -insecure chose that.
		tok, err := NewTokenFile(s.TokenFile, !tlsOn)
		if err != nil {
			return nil, nil, err
		}
		opts = append(opts, grpc.WithPerRPCCredentials(tok))
		rs = append(rs, tok)
	}
	return opts, rs, nil
}
