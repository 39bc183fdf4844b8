package admin

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seqd/seqd/admin/adminpb"
)

// DefaultSessionLease is the lease seqd grants by default (cmd/seqd
// -session-lease): a client that neither renews (KeepAlive, which the
// client library sends every third of the lease) nor disconnects within
// it is disconnected.
const DefaultSessionLease = 30 * time.Second

// MaxKeepAliveSessions bounds the session IDs one KeepAlive may carry.
const MaxKeepAliveSessions = 1024

// leases tracks the lease of every session granted through this server.
// A session is identified by its ID and the epoch it was granted in: IDs
// restart with each data path (mode switch, leadership term), so an
// expired lease disconnects its session only if the backend still runs
// that epoch.
type leases struct {
	ttl     time.Duration
	mu      sync.Mutex
	m       map[uint64]lease
	expired atomic.Uint64 // sessions disconnected because their lease ran out
}

type lease struct {
	epoch    uint64
	deadline time.Time
}

func (l *leases) grant(id, epoch uint64, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.m[id] = lease{epoch, now.Add(l.ttl)}
}

func (l *leases) drop(id uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.m, id)
}

// renew extends the leases of ids granted in epoch and returns the IDs it
// does not hold.
func (l *leases) renew(ids []uint64, epoch uint64, now time.Time) (unknown []uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, id := range ids {
		if ls, ok := l.m[id]; ok && ls.epoch == epoch {
			l.m[id] = lease{epoch, now.Add(l.ttl)}
		} else {
			unknown = append(unknown, id)
		}
	}
	return unknown
}

// takeExpired removes and returns the leases past their deadline.
func (l *leases) takeExpired(now time.Time) map[uint64]lease {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out map[uint64]lease
	for id, ls := range l.m {
		if now.After(ls.deadline) {
			if out == nil {
				out = map[uint64]lease{}
			}
			out[id] = ls
			delete(l.m, id)
		}
	}
	return out
}

// reap disconnects, every quarter lease until stop is closed, the
// sessions whose lease ran out.
func (s *Server) reap(stop <-chan struct{}) {
	l := s.leases
	t := time.NewTicker(max(l.ttl/4, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		exp := l.takeExpired(time.Now())
		if len(exp) == 0 {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		st, err := s.backend.Status(ctx)
		for id, ls := range exp {
			if err != nil || st.GetEpoch() != ls.epoch {
				continue // that data path, and its sessions, are gone
			}
			if derr := s.backend.Disconnect(ctx, &adminpb.DisconnectRequest{SessionId: id}); derr == nil {
				l.expired.Add(1)
				s.log.Info("session lease expired; disconnected", "session", id, "lease", l.ttl)
			}
		}
		cancel()
	}
}

// ExpiredSessions is how many sessions were disconnected because their
// lease ran out.
func (s *Server) ExpiredSessions() uint64 {
	if s.leases == nil {
		return 0
	}
	return s.leases.expired.Load()
}
