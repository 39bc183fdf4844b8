package worker

import (
	"fmt"

	"github.com/seqd/seqd/admin/handshake"
	"github.com/seqd/seqd/dataplane"
	"github.com/seqd/seqd/verbs"
)

// ConfigOf is the part of the settings every mode takes (dataplane.Config)
// that the worker pool reads.
func ConfigOf(c dataplane.Config) Config {
	return Config{Device: c.Device, Oracle: c.Oracle, Behind: c.Behind, Workers: c.Workers, RespQPs: c.RespQPs,
		Cores: c.Cores, QKey: c.QKey, Epoch: c.Epoch, Logger: c.Logger, MaxSessionRecv: c.MaxSessionRecv}
}

// Window is the window granted to a client that asked for asked: def
// when it asked for none (asked <= 0), and never more than most.
func Window(asked, def, most int) int {
	if asked <= 0 {
		asked = def
	}
	return min(asked, most)
}

// SessionShare: by default one session may hold at most 1/SessionShare
// of a worker's receive budget (its QPs × window), so that no one
// session, and only several together, can fill a worker.
const SessionShare = 4

// SessionCap is the most receives (QPs × window) one session may hold on
// a mode whose workers each have budget receives: c.MaxSessionRecv when
// set, else budget/SessionShare (at least 1); 0: no cap (MaxSessionRecv
// negative).
func (c *Config) SessionCap(budget int) int {
	switch {
	case c.MaxSessionRecv > 0:
		return c.MaxSessionRecv
	case c.MaxSessionRecv < 0:
		return 0
	}
	return max(1, budget/SessionShare)
}

// SessionWindow is the window granted per QP to a session of qps QPs
// that asked for asked: Window(asked, def, most), lowered so that the
// session holds at most limit receives over all its QPs (qps × window
// <= limit; limit 0: no cap). A session of more QPs than limit gets an
// error wrapping dataplane.ErrNoCapacity that names the flag raising it.
func SessionWindow(asked, def, most, qps, limit int) (int, error) {
	w := Window(asked, def, most)
	if limit <= 0 || qps <= 0 || qps*w <= limit {
		return w, nil
	}
	if qps > limit {
		return 0, fmt.Errorf("%w: %d QPs exceed the per-session cap of %d receives (QPs × window; seqd -max-session-recv)",
			dataplane.ErrNoCapacity, qps, limit)
	}
	return limit / qps, nil
}

// CheckQPs checks the client QPs of an admission: at least one, each
// QPN within 24 bits. Its errors wrap dataplane.ErrInvalidArgument.
func CheckQPs(qps []handshake.Endpoint) error {
	if len(qps) == 0 {
		return fmt.Errorf("%w: no queue pairs", dataplane.ErrInvalidArgument)
	}
	for i, q := range qps {
		if q.QPN > verbs.MaxQPN {
			return fmt.Errorf("%w: qps[%d]: QPN above 24 bits", dataplane.ErrInvalidArgument, i)
		}
	}
	return nil
}

// Lookup is the session ref names among sessions, those of epoch: an
// error wrapping dataplane.ErrUnknownSession, "<what> <id> of epoch <e>",
// if there is none.
func Lookup[S any](sessions map[uint64]S, ref handshake.SessionRef, epoch uint64, what string) (S, error) {
	s, ok := sessions[ref.ID]
	if !ok || ref.Epoch != epoch {
		var none S
		return none, fmt.Errorf("%w: %s %d of epoch %d", dataplane.ErrUnknownSession, what, ref.ID, ref.Epoch)
	}
	return s, nil
}

// Replaced is the session an admission replaces (dataplane.Admit's
// replaces), if sessions, those of epoch, hold it.
func Replaced[S any](sessions map[uint64]S, replaces handshake.SessionRef, epoch uint64) (S, bool) {
	if replaces.ID == 0 || replaces.Epoch != epoch {
		var none S
		return none, false
	}
	s, ok := sessions[replaces.ID]
	return s, ok
}
