package headeronly

import (
	"context"
	"testing"
	"time"

	"github.com/seqd/seqd/admin/adminpb"
	wk "github.com/seqd/seqd/internal/worker"
	"github.com/seqd/seqd/spec"
	"github.com/seqd/seqd/verbs"
	"github.com/seqd/seqd/verbs/rocev2"
)

// TestMisroutedDropped (issue 26): PROTOCOL.md ("Connecting", server_qps
// and assignment) says a request that reaches a server request QP other
// than the one its client QP is assigned to is dropped, even when that QP
// is another of the same session's. Such a request carries the session's
// own request Q_Key, so the provider takes it; the worker drops it as
// unknown_source and answers nothing, whether the two client QPs are on
// one worker (one worker, or several with more client QPs than workers)
// or on two.
func TestMisroutedDropped(t *testing.T) {
	for _, c := range []struct {
		name         string
		workers, qps int
		from, to     int // client QP from sends to client QP to's request QP
		sameWorker   bool
	}{
		{"one worker", 1, 2, 0, 1, true},
		{"two workers, same worker", 2, 3, 0, 2, true},
		{"two workers, other worker", 2, 3, 0, 1, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, err := New(Config{Config: wk.Config{Device: open(t), Oracle: &fakeOracle{}, Behind: errBehind, Workers: c.workers},
				MaxWindow: 64, MaxRecv: 128})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			var clis []*rawClient
			var eps []*adminpb.Endpoint
			for i := range c.qps {
				cli := newRawClient(t, uint32(0x6100+i))
				clis = append(clis, cli)
				eps = append(eps, cli.endpoint())
			}
			resp, err := pb(s).Connect(context.Background(), &adminpb.ConnectRequest{Qps: eps, Window: 8, ProtocolVersion: spec.ProtocolVersion})
			if err != nil {
				t.Fatal(err)
			}
			for _, cli := range clis {
				cli.qkey, cli.ansQKey = resp.GetQkey(), resp.GetAnswerQkey()
			}
			s.mu.Lock()
			sess := s.sessions[resp.GetSessionId()]
			same := sess.worker[c.from] == sess.worker[c.to]
			s.mu.Unlock()
			if same != c.sameWorker {
				t.Fatalf("client QPs %d and %d on workers %v: want same worker %v", c.from, c.to, sess.worker, c.sameWorker)
			}
			server := func(i int) (verbs.Address, verbs.QPN) {
				ep := resp.GetServerQps()[resp.GetAssignment()[i]]
				var a verbs.Address
				if err := a.UnmarshalBinary(ep.GetAddress()); err != nil {
					t.Fatal(err)
				}
				return a, verbs.QPN(ep.GetQpn())
			}
			// Routed as assigned: answered (resent only when dropped for
			// its age on a loaded machine).
			from := clis[c.from]
			own, ownQPN := server(c.from)
			for tag, try := spec.Tag(0), 0; ; try++ {
				aged := s.aged()
				from.send(own, ownQPN, spec.MustRequestImm(tag, spec.NoGuess), rocev2.DefaultPKey, 0)
				if a, ok := from.recv(5 * time.Second); ok {
					if spec.Imm(a.pk.Imm).Tag() != tag {
						t.Fatalf("answer tag %d, want %d", spec.Imm(a.pk.Imm).Tag(), tag)
					}
					break
				}
				if s.aged() == aged || try == 3 {
					t.Fatalf("no answer to a request routed as assigned (server %+v)", s.totals())
				}
				tag++
			}
			// A worker counts a batch after its doorbell: the answer may
			// be here before the count.
			deadline := time.Now().Add(10 * time.Second)
			for s.totals().Requests == 0 && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			// Misrouted: to the request QP of another client QP of the
			// same session. The worker either answers it (Requests rises)
			// or drops it; wait until one of them shows.
			before := s.totals()
			aged := s.aged()
			other, otherQPN := server(c.to)
			from.send(other, otherQPN, spec.MustRequestImm(100, spec.NoGuess), rocev2.DefaultPKey, 0)
			for {
				st := s.totals()
				if st.Drops["unknown_source"] > before.Drops["unknown_source"] || st.Requests > before.Requests || s.aged() > aged {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the misrouted request was neither answered nor dropped: %+v", st)
				}
				time.Sleep(time.Millisecond)
			}
			st := s.totals()
			if d := st.Drops["unknown_source"] - before.Drops["unknown_source"]; d != 1 || st.Requests != before.Requests {
				t.Fatalf("a request sent to another client QP's request QP of its session: answered %d, unknown_source +%d; want dropped as unknown_source",
					st.Requests-before.Requests, d)
			}
		})
	}
}
