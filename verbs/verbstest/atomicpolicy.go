package verbstest

import (
	"encoding/binary"
	"testing"

	"github.com/seqd/seqd/verbs"
)

// atomicPolicyTests hold a provider that offers verbs.AtomicPolicer to
// its contract; they skip on one that does not (a NIC).
func atomicPolicyTests() []test {
	const limit = 1000
	type step struct {
		op           verbs.Opcode
		add, swap    uint64
		word         uint64 // the word before the step
		setLimit     uint64 // SetAtomicLimit before the step (0: no call)
		raiseTo      uint64 // held back until SetAtomicLimit(raiseTo) (0: runs at once)
		refused      bool
		wantOrig     uint64 // when not refused
		wantWordNext uint64 // the word after the step
	}
	cases := []struct {
		name  string
		steps []step
	}{
		{"StepUpToLimit", []step{
			{op: verbs.OpAtomicFetchAdd, add: 1, word: limit - 1, wantOrig: limit - 1, wantWordNext: limit},
			{op: verbs.OpAtomicFetchAdd, add: 1, word: limit, wantOrig: limit, wantWordNext: limit + 1},
		}},
		{"HeldAboveLimit", []step{
			{op: verbs.OpAtomicFetchAdd, add: 1, word: limit + 1, raiseTo: limit + 1, wantOrig: limit + 1, wantWordNext: limit + 2},
			{op: verbs.OpAtomicFetchAdd, add: 1, word: limit + 2, raiseTo: limit + 2, wantOrig: limit + 2, wantWordNext: limit + 3},
		}},
		{"RaisedLimit", []step{{op: verbs.OpAtomicFetchAdd, add: 1, word: limit + 1, setLimit: limit + 1, wantOrig: limit + 1, wantWordNext: limit + 2}}},
		{"OtherAdd", []step{{op: verbs.OpAtomicFetchAdd, add: 2, word: 5, refused: true, wantWordNext: 5}}},
		{"Rewind", []step{{op: verbs.OpAtomicFetchAdd, add: 1<<64 - 1000, word: 5000, refused: true, wantWordNext: 5000}}},
		{"CmpSwap", []step{{op: verbs.OpAtomicCmpSwap, add: 5, swap: 1, word: 5, refused: true, wantWordNext: 5}}},
		{"Wrap", []step{{op: verbs.OpAtomicFetchAdd, add: 1, word: 1<<64 - 1, setLimit: 1<<64 - 1, refused: true, wantWordNext: 1<<64 - 1}}},
	}
	var tests []test
	for _, c := range cases {
		tests = append(tests, test{"RC/AtomicPolicy/" + c.name, func(t *testing.T, a, b verbs.Device) {
			x, y := ConnectPair(t, a, b, verbs.RC, verbs.MTU1024)
			ap, ok := y.PD.(verbs.AtomicPolicer)
			if !ok {
				t.Skipf("%s: the provider offers no verbs.AtomicPolicer", b.Name())
			}
			mr, err := ap.RegAtomicMR(64, verbs.AtomicPolicy{FetchAdd: 1, Limit: limit})
			if err != nil {
				t.Fatalf("RegAtomicMR: %v", err)
			}
			CloseLater(t, "atomic MR", mr)
			var o binary.ByteOrder = binary.LittleEndian
			if b.Attr().AtomicBigEndian {
				o = binary.BigEndian
			}
			refused := uint64(0)
			for i, s := range c.steps {
				if s.setLimit != 0 {
					mr.SetAtomicLimit(s.setLimit)
				}
				o.PutUint64(mr.Bytes()[8:], s.word)
				Fill(x.MR.Bytes()[:8], 0xee)
				naks, _ := Counter(b, verbs.CounterRCNaks)
				PostSend(t, x.QP, verbs.SendWR{ID: uint64(i), Opcode: s.op, Flags: verbs.Signaled, SG: SG(x.MR, 0, 8),
					RemoteAddr: mr.Addr() + 8, RKey: mr.RKey(), CompareAdd: s.add, Swap: s.swap})
				if s.raiseTo != 0 {
					// Held: answered not-ready, the word untouched, until
					// the limit rises.
					WaitCounter(t, b, verbs.CounterRCNaks, naks+1, DefaultTimeout)
					if got := o.Uint64(mr.Bytes()[8:]); got != s.word {
						t.Errorf("step %d: a held FETCH_AND_ADD changed the word to %#x", i, got)
					}
					mr.SetAtomicLimit(s.raiseTo)
				}
				wc := PollOne(t, x.SendCQ, DefaultTimeout)
				if s.refused {
					refused++
					if wc.Status != verbs.WCRemAccessErr {
						t.Errorf("step %d: %v of %#x on %#x completed %s, want %v", i, s.op, s.add, s.word, FormatWC(wc), verbs.WCRemAccessErr)
					}
					if st := y.QP.State(); st != verbs.StateErr {
						t.Errorf("step %d: after a refused atomic the responder's QP is %v, want ERR", i, st)
					}
				} else if wc.Status != verbs.WCSuccess {
					t.Errorf("step %d: %v of %#x on %#x completed %s, want success", i, s.op, s.add, s.word, FormatWC(wc))
				} else if got := o.Uint64(x.MR.Bytes()); got != s.wantOrig {
					t.Errorf("step %d: returned %#x, want %#x", i, got, s.wantOrig)
				}
				if got := o.Uint64(mr.Bytes()[8:]); got != s.wantWordNext {
					t.Errorf("step %d: the word is %#x, want %#x", i, got, s.wantWordNext)
				}
			}
			if got := mr.AtomicRefused(); got != refused {
				t.Errorf("AtomicRefused = %d, want %d", got, refused)
			}
		}})
	}
	return tests
}
