package client

import (
	"crypto/rand"
	"fmt"
	"net/netip"

	"github.com/seqd/seqd/admin/adminclient"
	"github.com/seqd/seqd/admin/adminpb"
	"github.com/seqd/seqd/admin/handshake"
)

// session is the session the client's last Connect was granted. Dial,
// then the engine goroutine, own it (the lease renewer reads its own
// copy, leaseState).
type session struct {
	id     uint64
	token  []byte // the session's capability: KeepAlive and Disconnect name it
	epoch  uint64
	dataIP netip.Addr // the server's data-plane address
	// handle names the client's first session in Connect's replaces
	// until a grant names it by token: a first Connect admitted after the
	// client gave up on it is then replaced by the next one.
	handle []byte
}

func newSession() session {
	s := session{handle: make([]byte, adminclient.TokenLen)}
	rand.Read(s.handle) // never fails (crypto/rand aborts the program instead)
	return s
}

// set records the session a Connect just granted.
func (s *session) set(resp *adminpb.ConnectResponse) {
	s.id, s.token, s.epoch = resp.GetSessionId(), resp.GetSessionToken(), resp.GetEpoch()
	s.dataIP = serverDataIP(resp)
}

// replaces is what the next Connect names in ConnectRequest.replaces:
// the token of the session last granted, or before the first grant the
// client's own handle.
func (s *session) replaces() []byte {
	if len(s.token) != 0 {
		return s.token
	}
	return s.handle
}

// disconnectReq releases the session: by its token, which names only
// that session.
func (s *session) disconnectReq() *adminpb.DisconnectRequest {
	return handshake.EncodeSessionRef(handshake.SessionRef{ID: s.id, Epoch: s.epoch}, s.token)
}

// checkVersion refuses a Connect reply of another protocol version
// (handshake.CheckVersion) before the session is recorded; the grant's
// decoder checks it again for the dialer.
func checkVersion(resp *adminpb.ConnectResponse) error {
	if err := handshake.CheckVersion(resp); err != nil {
		return fmt.Errorf("%w: connect: %w", ErrUnavailable, err)
	}
	return nil
}
