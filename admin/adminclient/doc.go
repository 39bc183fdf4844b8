// Package adminclient is what a client of seqd's admin plane needs, and
// nothing of the server: Dial with the loopback-only plaintext default,
// the client's TLS and bearer-token credentials, the flags seqctl and
// loadgen share (ClientSecurity; ReloadableDialOptions for a long-running
// client such as seqd-pd, whose token and TLS files are re-read in place),
// the roles Status reports, a standby's
// redirect, and the errors of each. The client library, seqctl and
// loadgen import it instead of package admin (the server, which pulls in
// Prometheus and the gRPC health and reflection servers); package admin
// uses the same definitions.
package adminclient

import "github.com/seqd/seqd/admin/handshake"

// Roles reported in StatusResponse.role.
const (
	RoleLeader  = "leader"
	RoleStandby = "standby"
	RoleSingle  = "single"
)

// DefaultAddr is the admin plane's default address (seqd -admin, seqctl
// -admin, loadgen -admin).
const DefaultAddr = "127.0.0.1:7070"

// ServiceName is the full name of the Admin service, as health checks and
// reflection see it.
const ServiceName = "seqd.admin.v1.Admin"

// TokenLen is the length of a session token (ConnectResponse.session_token),
// and of the handle a client names in its first Connect's replaces.
const TokenLen = 16

// ErrUnavailable: the admin server or its data plane cannot serve right
// now; retrying later may work (gRPC Unavailable). Dial returns it when
// the first attempt to connect fails. It is the data plane's error kind
// of the same name (one definition, handshake's).
var ErrUnavailable = handshake.ErrUnavailable
