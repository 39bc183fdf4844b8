package headeronly

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seqd/seqd/admin"
	"github.com/seqd/seqd/admin/adminpb"
	"github.com/seqd/seqd/admin/admintest"
	"github.com/seqd/seqd/client"
	wk "github.com/seqd/seqd/internal/worker"
	"github.com/seqd/seqd/loadgen/verify"
	"github.com/seqd/seqd/spec"
	"github.com/seqd/seqd/verbs"
	"github.com/seqd/seqd/verbs/verbstest"
)

// connectEnd admits a raw UD endpoint with window w and returns a
// function that sends it a request with a tag.
func connectEnd(t *testing.T, s *Server, e *verbstest.End, w uint32) func(spec.Tag) {
	t.Helper()
	if err := verbs.BringUpUD(e.QP, verbs.DefaultQKey, 0); err != nil {
		t.Fatal(err)
	}
	a, _ := e.QP.Address().MarshalBinary()
	resp, err := pb(s).Connect(context.Background(), &adminpb.ConnectRequest{
		Qps: []*adminpb.Endpoint{{Address: a, Qpn: uint32(e.QP.QPN())}}, Window: w, ProtocolVersion: spec.ProtocolVersion})
	if err != nil {
		t.Fatal(err)
	}
	// Answers carry the session's own answer Q_Key (PROTOCOL.md, sessions).
	if err := e.QP.Modify(&verbs.QPAttr{QKey: resp.GetAnswerQkey()}, verbs.AttrQKey); err != nil {
		t.Fatal(err)
	}
	srv := resp.GetServerQps()[resp.GetAssignment()[0]]
	var dst verbs.Address
	if err := dst.UnmarshalBinary(srv.GetAddress()); err != nil {
		t.Fatal(err)
	}
	ah := verbstest.AH(t, e, dst)
	return func(tag spec.Tag) {
		wr := []verbs.SendWR{{ID: 1, Opcode: verbs.OpSendWithImm, Imm: uint32(spec.MustRequestImm(tag, spec.NoGuess)),
			AH: ah, RemoteQPN: verbs.QPN(srv.GetQpn()), RemoteQKey: resp.GetQkey()}}
		if _, err := e.QP.PostSend(wr); err != nil {
			t.Fatal(err)
		}
	}
}

// TestNoAnswerAfterMaxResidence: a request whose claim succeeds only
// after spec.MaxResidence is never answered; it is dropped (counted as
// late) right before the doorbell. Before the fix the age was checked
// only while the oracle reported behind, so this answer left 3×
// MaxResidence after its request arrived.
func TestNoAnswerAfterMaxResidence(t *testing.T) {
	o := &fakeOracle{}
	s, err := New(Config{Config: wk.Config{Device: open(t), Oracle: o, Behind: errBehind, Workers: 1}, MaxWindow: 64, MaxRecv: 128})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	cli := verbstest.NewEnd(t, open(t), verbs.UD)
	send := connectEnd(t, s, cli, 8)
	for i := range 4 {
		verbstest.PostRecv(t, cli.QP, verbs.RecvWR{ID: uint64(i), SG: verbstest.SG(cli.MR, i*64, 64)})
	}

	o.Delay.Store(int64(3 * spec.MaxResidence))
	wc := make([]verbs.WC, 1)
	deadline := time.Now().Add(10 * time.Second)
	// On a loaded machine a request can already be too old when the
	// worker reads it (dropped as expired before any claim): send another
	// until one is claimed.
	for tag := spec.Tag(1); s.totals().Drops["late"] == 0; tag++ {
		send(tag)
		for s.aged() < uint64(tag) {
			if n, _ := cli.RecvCQ.Poll(wc); n > 0 {
				t.Fatalf("answered although the claim took %v, longer than MaxResidence %v", 3*spec.MaxResidence, spec.MaxResidence)
			}
			if time.Now().After(deadline) {
				t.Fatalf("neither answered nor dropped: stats %+v", s.totals())
			}
			time.Sleep(time.Millisecond)
		}
	}
	// The worker counted the drop instead of posting: nothing is in flight.
	if n, _ := cli.RecvCQ.Poll(wc); n > 0 {
		t.Fatalf("answered and counted late: %+v", wc[0])
	}
	if st := s.totals(); st.Drops["late"] != 1 || st.Requests != 0 {
		t.Fatalf("stats %+v, want one late drop and nothing served", st)
	}

	// A prompt claim is answered as usual (again a request can be too old
	// when read on a loaded machine: resend until one is answered).
	o.Delay.Store(0)
	deadline = time.Now().Add(10 * time.Second)
	for tag := spec.Tag(spec.NumTags - 1); ; tag-- {
		send(tag)
		for stop := time.Now().Add(100 * time.Millisecond); time.Now().Before(stop); time.Sleep(time.Millisecond) {
			if n, _ := cli.RecvCQ.Poll(wc); n > 0 {
				if wc[0].Status != verbs.WCSuccess {
					t.Fatalf("answer %+v", wc[0])
				}
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no prompt claim answered: %+v", s.totals())
		}
	}
}

// TestStalledAnswersWhileTagsWrap (issue 12, item 11): a worker that
// stalls between claim and doorbell for far longer than the clients' tag
// quarantine, while the client keeps retransmitting under fresh tags
// until its tags wrap, never makes a client accept a stale value: the
// stalled batches (and the requests that queued behind them) are dropped
// by age, and every value the clients return passes the verifier.
func TestStalledAnswersWhileTagsWrap(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for seconds")
	}
	s, err := New(Config{Config: wk.Config{Device: open(t), Oracle: &fakeOracle{}, Behind: errBehind, Workers: 2}, MaxWindow: 64, MaxRecv: 1024})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	_, addr := admintest.Start(t, admin.Config{}, pb(s))

	// Long enough for a client QP retransmitting every 2ms, 32 tags at a
	// time, to go through all NumTags tags during one stall.
	const window, retransmit = 32, 2 * time.Millisecond
	stall := time.Duration(2*spec.NumTags/window) * retransmit
	var batches, stalls atomic.Int64
	hook := func() {
		if batches.Add(1)%40 == 0 && stalls.Load() < 3 {
			stalls.Add(1)
			time.Sleep(stall)
		}
	}
	s.Workers[0].Stall.Store(&hook)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var v verify.History
	origin := time.Now()
	var clients []*client.Client
	for range 2 {
		c, err := client.Dial(ctx, addr, client.WithDevice("soft", "127.0.0.1:0", ""), client.WithQPs(2),
			client.WithWindow(window), client.WithRetransmit(retransmit), client.WithTimeout(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		clients = append(clients, c)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := clients[i%len(clients)]
			for stalls.Load() < 3 {
				start := time.Since(origin)
				ts, err := c.GetTimestamp(ctx)
				if err != nil {
					errs <- err
					return
				}
				v.Record(i, verify.Call{Start: start, End: time.Since(origin), Value: uint64(ts)})
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("GetTimestamp: %v", err)
	}
	if err := v.Check().Err(); err != nil {
		t.Fatal(err)
	}
	st := s.totals()
	var retrans uint64
	for i, c := range clients {
		cs := c.Stats()
		if cs.Regressions != 0 {
			t.Errorf("client %d accepted values below earlier ones: %+v", i, cs)
		}
		retrans += cs.Retransmits
	}
	if st.Drops["late"] == 0 {
		t.Fatalf("no batch was dropped as late although %d stalls of %v ran: %+v", stalls.Load(), stall, st)
	}
	t.Logf("%d calls, %d stalls of %v; server: late %d, expired %d; clients retransmitted %d",
		v.Len(), stalls.Load(), stall, st.Drops["late"], st.Drops["expired"], retrans)
}
