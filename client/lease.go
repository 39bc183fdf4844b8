package client

import (
	"bytes"
	"context"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"github.com/seqd/seqd/admin/adminpb"
)

// lease keeps the current session's lease alive (KeepAlive every third
// of it) on its own goroutine, and tells the engine when the server no
// longer holds the session.
type lease struct {
	cur  atomic.Pointer[leaseState] // the session the renewer keeps alive
	lost atomic.Bool                // the server said it no longer holds it
}

// leaseState is what the renewer needs of the current session, published
// after each (re)connect.
type leaseState struct {
	adm     adminpb.AdminClient
	session uint64
	token   []byte
	epoch   uint64
	every   time.Duration // a third of the lease; 0: the server grants none
}

// publish records the session a Connect just granted. Called by the
// goroutine that runs Connect (Dial, then the engine).
func (l *lease) publish(adm adminpb.AdminClient, resp *adminpb.ConnectResponse) {
	ls := &leaseState{adm: adm, session: resp.GetSessionId(), token: resp.GetSessionToken(), epoch: resp.GetEpoch()}
	if ms := resp.GetLeaseMs(); ms > 0 {
		ls.every = max(time.Duration(ms)*time.Millisecond/3, time.Millisecond)
	}
	l.cur.Store(ls)
	l.lost.Store(false)
}

// renew keeps the session's lease alive until ctx ends. When the server
// no longer knows the session (it expired while the client was paused,
// or the server lost it), it sets lost and calls kick: the engine's next
// reconnect check connects again instead of trusting an unchanged epoch.
func (l *lease) renew(ctx context.Context, log *slog.Logger, kick func()) {
	for {
		ls := l.cur.Load()
		wait := time.Second
		if ls != nil && ls.every > 0 {
			wait = ls.every
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		if ls == nil || ls.every == 0 || ls != l.cur.Load() {
			continue // no lease, or a new session: wait a period for it
		}
		kctx, cancel := context.WithTimeout(ctx, max(ls.every, 100*time.Millisecond))
		resp, err := ls.adm.KeepAlive(kctx, &adminpb.KeepAliveRequest{SessionTokens: [][]byte{ls.token}})
		cancel()
		if err == nil && slices.ContainsFunc(resp.GetUnknownTokens(), func(t []byte) bool { return bytes.Equal(t, ls.token) }) && l.cur.Load() == ls {
			log.Info("server no longer holds our session; will reconnect", "session", ls.session)
			l.lost.Store(true)
			kick()
		}
	}
}
