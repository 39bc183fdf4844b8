package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	"github.com/seqd/seqd/admin/adminclient"
	"github.com/seqd/seqd/admin/adminpb"
)

// maxRedirects bounds how many standby redirects one connect follows per
// known address.
const maxRedirects = 3

// dialAttempt bounds one attempt to dial and connect to one admin
// address: a paused (SIGSTOPped) server accepts TCP but never answers.
const dialAttempt = 500 * time.Millisecond

// adminConn is the client's admin connection and the admin addresses it
// knows (an HA group's instances, and those redirects named). Dial, then
// the engine goroutine, own it; Endpoint may be read from anywhere.
type adminConn struct {
	log      *slog.Logger
	dialOpts []grpc.DialOption
	cc       *grpc.ClientConn
	adm      adminpb.AdminClient
	addrs    []string               // every admin address known
	cur      atomic.Pointer[string] // the one cc is connected to
}

// learn adds an admin address to the ones the client knows.
func (a *adminConn) learn(addr string) {
	if addr != "" && !slices.Contains(a.addrs, addr) {
		a.addrs = append(a.addrs, addr)
	}
}

// endpoint is the admin address cc is connected to.
func (a *adminConn) endpoint() string {
	if p := a.cur.Load(); p != nil {
		return *p
	}
	return ""
}

// connectAny runs connect (a Status, then the mode's Connect): through
// the current admin connection first (unless skipCurrent: it just failed
// to answer), then at the address a standby redirected to, then at every
// known admin address in turn (following redirects as they come), each
// attempt bounded by perTry so a paused server costs no more than that.
// On success the admin connection is the one that admitted the client.
func (a *adminConn) connectAny(ctx context.Context, perTry time.Duration, skipCurrent bool, connect func(context.Context) error) error {
	var lastErr error
	var cands []string
	if a.cc != nil && !skipCurrent {
		tctx, cancel := context.WithTimeout(ctx, perTry)
		err := connect(tctx)
		cancel()
		if err == nil {
			return nil
		}
		lastErr = err
		if l := redirectTo(err); l != "" {
			cands = append(cands, l)
		}
	}
	// Every known address, starting after the current one.
	failed := a.endpoint() // the one that just failed to answer, when skipCurrent
	cur := slices.Index(a.addrs, failed)
	for i := range a.addrs {
		cands = append(cands, a.addrs[(cur+1+i)%len(a.addrs)])
	}
	tried := map[string]bool{}
	hops := 0
	for len(cands) > 0 && ctx.Err() == nil {
		addr := cands[0]
		cands = cands[1:]
		if tried[addr] || (addr == a.endpoint() && a.cc != nil && !skipCurrent) {
			continue
		}
		tried[addr] = true
		tctx, cancel := context.WithTimeout(ctx, perTry)
		cc, err := adminclient.Dial(tctx, addr, a.dialOpts...)
		if err != nil {
			cancel()
			lastErr = fmt.Errorf("%w: %w", ErrUnavailable, err)
			continue
		}
		oldCC := a.cc
		a.cc, a.adm = cc, adminpb.NewAdminClient(cc)
		err = connect(tctx)
		cancel()
		// On failure the server still answered the dial: keep this
		// connection for the next attempt, which starts with it (one TLS
		// handshake less for a busy server); the old one failed or is
		// elsewhere.
		if oldCC != nil {
			oldCC.Close()
		}
		a.cur.Store(&addr)
		if err == nil {
			a.learn(addr)
			return nil
		}
		lastErr = err
		// A redirect to the server that just failed to answer (etcd
		// still names a paused leader) is not followed: it stays last.
		if l := redirectTo(err); l != "" && !tried[l] && !(skipCurrent && l == failed) && hops < maxRedirects*len(a.addrs) {
			hops++
			a.log.Debug("following redirect", "from", addr, "to", l)
			cands = append([]string{l}, cands...)
		}
	}
	if lastErr == nil {
		lastErr = fmt.Errorf("%w: %w", ErrUnavailable, ctx.Err())
	}
	return lastErr
}

// leaderProbe bounds asking one other instance who leads (leaderMoved):
// a live standby answers in well under a millisecond on a LAN.
const leaderProbe = 100 * time.Millisecond

// leaderMoved asks the other known instances who leads, and reports
// whether one names another leader than the current endpoint: itself
// (role leader), or, as a standby, another address or none (the current
// leader's election key is gone and its successor is not serving yet).
// Standbys that still name the current endpoint, and instances that do
// not answer, leave the question to the next. (A leader advertised
// under another name than the one the client dialed reads as moved: the
// client then reconnects after one timed-out probe instead of
// slowProbesBeforeReconnect.)
func (a *adminConn) leaderMoved(ctx context.Context) bool {
	cur := a.endpoint()
	for _, addr := range a.addrs {
		if addr == cur {
			continue
		}
		tctx, cancel := context.WithTimeout(ctx, leaderProbe)
		cc, err := adminclient.Dial(tctx, addr, a.dialOpts...)
		if err != nil {
			cancel()
			continue
		}
		st, err := adminpb.NewAdminClient(cc).Status(tctx, &adminpb.StatusRequest{})
		cancel()
		cc.Close()
		if err != nil {
			continue
		}
		switch st.GetRole() {
		case adminclient.RoleLeader:
			return true
		case adminclient.RoleStandby:
			if st.GetLeader() != cur {
				return true
			}
		}
	}
	return false
}

// unavailable wraps an admin call's error: a standby's redirect keeps the
// leader it names (redirectTo finds it).
func unavailable(call string, err error) error {
	if leader, ok := adminclient.LeaderFromError(err); ok && leader != "" {
		return fmt.Errorf("%w: %s: %w", ErrUnavailable, call, &redirect{leader: leader, err: err})
	}
	return fmt.Errorf("%w: %s: %v", ErrUnavailable, call, err)
}

// redirectTo is the leader a standby's refusal names, "" when err is no
// redirect or names no leader.
func redirectTo(err error) string {
	var rd *redirect
	if errors.As(err, &rd) {
		return rd.leader
	}
	return ""
}

// redirect is a standby's answer to Connect: the leader's admin address.
type redirect struct {
	leader string
	err    error
}

func (r *redirect) Error() string {
	return "redirected to the leader at " + r.leader + ": " + r.err.Error()
}
