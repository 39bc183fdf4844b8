package worker

import (
	"fmt"

	"github.com/seqd/seqd/dataplane"
	"github.com/seqd/seqd/verbs"
)

// ConfigOf is the part of the settings every mode takes (dataplane.Config)
// that the worker pool reads.
func ConfigOf(c dataplane.Config) Config {
	return Config{Device: c.Device, Oracle: c.Oracle, Behind: c.Behind, Workers: c.Workers, RespQPs: c.RespQPs,
		Cores: c.Cores, QKey: c.QKey, Epoch: c.Epoch, Logger: c.Logger}
}

// Window is the window granted to a client that asked for asked: def
// when it asked for none (asked <= 0), and never more than most.
func Window(asked, def, most int) int {
	if asked <= 0 {
		asked = def
	}
	return min(asked, most)
}

// CheckQPs checks the client QPs of an admission: at least one, each
// QPN within 24 bits. Its errors wrap dataplane.ErrInvalidArgument.
func CheckQPs(qps []dataplane.Endpoint) error {
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
func Lookup[S any](sessions map[uint64]S, ref dataplane.SessionRef, epoch uint64, what string) (S, error) {
	s, ok := sessions[ref.ID]
	if !ok || ref.Epoch != epoch {
		var none S
		return none, fmt.Errorf("%w: %s %d of epoch %d", dataplane.ErrUnknownSession, what, ref.ID, ref.Epoch)
	}
	return s, nil
}

// Replaced is the session an admission replaces (dataplane.Admit's
// replaces), if sessions, those of epoch, hold it.
func Replaced[S any](sessions map[uint64]S, replaces dataplane.SessionRef, epoch uint64) (S, bool) {
	if replaces.ID == 0 || replaces.Epoch != epoch {
		var none S
		return none, false
	}
	s, ok := sessions[replaces.ID]
	return s, ok
}
