package client

import (
	"bytes"
	"context"
	"slices"
	"time"

	"github.com/seqd/seqd/admin/adminpb"
)

// leaseState is what the renewer needs of the current session, published
// by the engine after each (re)connect.
type leaseState struct {
	adm     adminpb.AdminClient
	session uint64
	token   []byte
	epoch   uint64
	every   time.Duration // a third of the lease; 0: the server grants none
}

// publishLease records the session a Connect just granted. Called by the
// goroutine that runs Connect (Dial, then the engine).
func (c *Client) publishLease(resp *adminpb.ConnectResponse) {
	ls := &leaseState{adm: c.adm, session: resp.GetSessionId(), token: resp.GetSessionToken(), epoch: resp.GetEpoch()}
	if ms := resp.GetLeaseMs(); ms > 0 {
		ls.every = max(time.Duration(ms)*time.Millisecond/3, time.Millisecond)
	}
	c.lease.Store(ls)
	c.sessionLost.Store(false)
}

// renew keeps the session's lease alive (KeepAlive every third of it)
// until the client closes. When the server no longer knows the session
// (it expired while the client was paused, or the server lost it), the
// engine's next reconnect check connects again instead of trusting an
// unchanged epoch.
func (c *Client) renew(ctx context.Context) {
	for {
		ls := c.lease.Load()
		wait := time.Second
		if ls != nil && ls.every > 0 {
			wait = ls.every
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		if ls == nil || ls.every == 0 || ls != c.lease.Load() {
			continue // no lease, or a new session: wait a period for it
		}
		kctx, cancel := context.WithTimeout(ctx, max(ls.every, 100*time.Millisecond))
		resp, err := ls.adm.KeepAlive(kctx, &adminpb.KeepAliveRequest{SessionTokens: [][]byte{ls.token}})
		cancel()
		if err == nil && slices.ContainsFunc(resp.GetUnknownTokens(), func(t []byte) bool { return bytes.Equal(t, ls.token) }) && c.lease.Load() == ls {
			c.log.Info("server no longer holds our session; will reconnect", "session", ls.session)
			c.sessionLost.Store(true)
			c.kickNow()
		}
	}
}
