package atomics

import (
	"testing"

	"github.com/seqd/seqd/internal/claimtest"
	"github.com/seqd/seqd/verbs"
	_ "github.com/seqd/seqd/verbs/soft"
)

// The fake oracle and soft devices every mode's tests share.
type fakeOracle = claimtest.Oracle

var errBehind = claimtest.ErrBehind

func open(t testing.TB, opts string) verbs.Device { return claimtest.OpenSoft(t, opts) }
