package e2e

import (
	"fmt"
	"time"

	"github.com/anishathalye/porcupine"
)

// oracleModel is porcupine's model of seqd as a sequential object: each
// call returns a value above every value returned before it in the
// linearization. The state is the last value handed out.
var oracleModel = porcupine.Model{
	Init: func() any { return uint64(0) },
	Step: func(state, _, output any) (bool, any) {
		v := output.(uint64)
		return v > state.(uint64), v
	},
	Equal: func(a, b any) bool { return a.(uint64) == b.(uint64) },
	DescribeOperation: func(_, output any) string {
		return fmt.Sprintf("get() -> %d", output.(uint64))
	},
}

// Linearizable checks the recorded history with porcupine against
// oracleModel, independently of Check's sweep: the history is
// linearizable exactly when some order of the calls, consistent with
// real time, hands out increasing values. It returns an error for a
// history that is not, and for one porcupine could not decide within
// timeout (a large, highly concurrent history).
func (v *Verifier) Linearizable(timeout time.Duration) error {
	v.mu.Lock()
	ops := make([]porcupine.Operation, len(v.calls))
	for i, c := range v.calls {
		ops[i] = porcupine.Operation{ClientId: c.Caller, Call: int64(c.Start), Return: int64(c.End), Output: c.Value}
	}
	v.mu.Unlock()
	switch res := porcupine.CheckOperationsTimeout(oracleModel, ops, timeout); res {
	case porcupine.Ok:
		return nil
	case porcupine.Illegal:
		return fmt.Errorf("porcupine: the history of %d calls is not linearizable", len(ops))
	default:
		return fmt.Errorf("porcupine: could not decide on %d calls within %v", len(ops), timeout)
	}
}
