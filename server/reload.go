package server

import (
	"log/slog"

	"google.golang.org/grpc/credentials"

	"github.com/seqd/seqd/admin"
	"github.com/seqd/seqd/internal/reload"
)

// secretWatcher re-reads the admin plane's secrets: the TLS key pair and
// client CA (creds, an *admin.ServerCreds) and the token file (auth), on
// Security.Reload and when their files change. Its metrics are
// seqd_admin_secret_reloads_total and seqd_admin_secret_reload_errors_total.
func secretWatcher(log *slog.Logger, creds credentials.TransportCredentials, auth *admin.Authorizer) *reload.Watcher {
	var srcs []reload.Source
	if sc, ok := creds.(*admin.ServerCreds); ok {
		srcs = append(srcs, sc)
	}
	if auth != nil && len(auth.Files()) > 0 {
		srcs = append(srcs, auth)
	}
	return reload.New("seqd_admin", log, srcs...)
}
