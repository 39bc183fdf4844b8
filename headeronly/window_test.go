package headeronly

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/seqd/seqd/admin/handshake"
	"github.com/seqd/seqd/internal/ahcache"
	wk "github.com/seqd/seqd/internal/worker"
	"github.com/seqd/seqd/spec"
	"github.com/seqd/seqd/verbs"
	"github.com/seqd/seqd/verbs/rocev2"
)

// TestWindowAtAllTimes (issue 26): the window rule of PROTOCOL.md
// ("Residence and windows"): at no moment are more than window requests
// of one client QP at the server, counted from the moment a request takes
// one of its request QP's receives to the provider call that posts its
// answer (or drops it), whatever the batches. The worker is driven by
// hand so that the order of events is the test's: a client QP with
// window 4 sends 4 requests, the worker polls them (they are at the
// server, unanswered), and the client sends 4 more, one at a time, each
// accounted for (a receive completion, or the provider's no-receive drop)
// before the next: none of them may take a receive, so that no more than
// the window is answered. (With a receive slack, the old layout took them
// all and a later batch answered them: 8 of a window of 4.) Then, once
// the first 4 are answered, 4 more sent one at a time are all taken: the
// rule bounds the requests at the server, not the rate.
func TestWindowAtAllTimes(t *testing.T) {
	const window = 4
	dev := open(t)
	cfg, err := Config{Config: wk.Config{Device: dev, Oracle: &fakeOracle{}, Behind: errBehind, Workers: 1,
		Logger: slog.New(slog.DiscardHandler)}, MaxWindow: 64, MaxRecv: 128}.validate()
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{cfg: cfg, log: cfg.Logger, sessions: map[uint64]*session{}, start: time.Now()}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	if s.PD, err = dev.AllocPD(); err != nil {
		t.Fatal(err)
	}
	s.AHs = ahcache.New(s.PD, 0)
	w, err := newWorker(s, 0) // not started: the test runs its loop
	if err != nil {
		t.Fatal(err)
	}
	s.Workers = []*worker{w}
	t.Cleanup(func() {
		w.Close()
		s.AHs.Close()
		s.PD.Close()
	})
	cli := newRawClient(t, 0x7100)
	g, rqs, err := s.admitLocked(context.Background(), handshake.Admission{Window: window,
		QPs: []handshake.Endpoint{{Addr: cli.addr, QPN: verbs.QPN(cli.qpn)}}}, handshake.SessionRef{})
	if err != nil {
		t.Fatal(err)
	}
	w.takeInbox(false)
	cli.qkey, cli.ansQKey = g.QKey, g.AnswerQKey
	dst, dstQPN := g.ServerQPs[0].Addr, g.ServerQPs[0].QPN
	noRecv := func() uint64 { n, _ := rqs[0].noRecvDrops(); return n }

	tag := spec.Tag(0)
	buf := make([]verbs.WC, 64)
	// send sends one request and polls the worker's CQ until the provider
	// has taken it (a receive completion, appended to held) or dropped it
	// for want of a receive. It reports whether it was taken.
	send := func(held *[]verbs.WC) bool {
		t.Helper()
		drops := noRecv()
		cli.send(dst, dstQPN, spec.MustRequestImm(tag, spec.NoGuess), rocev2.DefaultPKey, 0)
		tag++
		for deadline := time.Now().Add(10 * time.Second); ; {
			n, err := w.reqCQ.Poll(buf)
			if err != nil {
				t.Fatal(err)
			}
			took := false
			for _, wc := range buf[:n] {
				*held = append(*held, wc)
				took = took || wc.Opcode == verbs.WCRecv
			}
			if took {
				return true
			}
			if noRecv() > drops {
				return false
			}
			if time.Now().After(deadline) {
				t.Fatalf("request %d neither received nor dropped", tag-1)
			}
		}
	}

	var first, over, later []verbs.WC
	for range window {
		if !send(&first) {
			t.Fatalf("request %d of the first %d found no receive", tag-1, window)
		}
	}
	taken := 0
	for range window { // while the first window's requests are at the server
		if send(&over) {
			taken++
		}
	}
	w.handle(first)
	if len(over) > 0 {
		w.handle(over)
	}
	answered := w.s.totals().Requests
	if taken != 0 || noRecv() != window || answered > window {
		t.Fatalf("%d requests sent while the window's %d were at the server: %d took a receive, %d dropped by the provider; %d of the %d answered (at most the window, %d, may be)",
			window, window, taken, noRecv(), answered, 2*window, window)
	}
	for range window { // after the answers left: within the window
		if !send(&later) {
			t.Fatalf("request %d, sent after the window's answers were posted, found no receive", tag-1)
		}
	}
	w.handle(later)
	if st := w.s.totals(); st.Requests+st.Drops["expired"]+st.Drops["late"] != 2*window || sum(st.Drops) != st.Drops["expired"]+st.Drops["late"] {
		t.Fatalf("answered %d of %d requests within the window, drops %v", st.Requests, 2*window, st.Drops)
	}
}
