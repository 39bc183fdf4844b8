package client

import (
	"context"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seqd/seqd/server"
	"github.com/seqd/seqd/spec"
	"github.com/seqd/seqd/verbs"
	"github.com/seqd/seqd/verbs/verbstest"
)

// TestSourceCheck: a forger that knows the victim session's answer Q_Key
// (which the protocol never tells it: this stands for a lucky guess, one
// in 2^31) sends full answers over every tag to the victim's QP from its
// own QP. The victim's provider accepts them (right Q_Key); the client's
// source check drops every one (they do not come from a response QP the
// server named at Connect) and counts them in Stats.Forged; no forged
// value is returned, and the victim keeps being served.
func TestSourceCheck(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan server.Addrs, 1)
	done := make(chan error, 1)
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	go func() {
		done <- server.Run(ctx, server.Config{Device: "127.0.0.1:0", Admin: "127.0.0.1:0", Metrics: "off", Data: t.TempDir(), Init: true},
			quiet, func(a server.Addrs) { ready <- a })
	}()
	var addrs server.Addrs
	select {
	case addrs = <-ready:
	case err := <-done:
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); <-done })
	dctx, dcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer dcancel()
	c, err := Dial(dctx, addrs.Admin, WithQPs(1), WithWindow(16), WithLogger(quiet), WithTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.GetTimestamp(dctx); err != nil {
		t.Fatal(err)
	}
	// Read before the load: the engine writes these only on a reconnect.
	s0 := c.eng.tr.(*specS0)
	qkey, dst, dstQPN := s0.ansQKey, s0.qps[0].qp.Address(), s0.qps[0].qp.QPN()

	dev, err := verbs.Open("soft", "127.0.0.1:0", nil)
	if err != nil {
		t.Skipf("soft provider: %v", err)
	}
	t.Cleanup(func() { dev.Close() })
	f := verbstest.NewEnd(t, dev, verbs.UD)
	if err := verbs.BringUpUD(f.QP, qkey, 0); err != nil {
		t.Fatal(err)
	}
	ah := verbstest.AH(t, f, dst)

	const forgedMark = 1 << 62
	var accepted atomic.Uint64
	var calls atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var callErr atomic.Pointer[error]
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				ts, err := c.GetTimestamp(dctx)
				if err != nil {
					callErr.CompareAndSwap(nil, &err)
					return
				}
				calls.Add(1)
				if uint64(ts) >= forgedMark {
					accepted.Add(1)
				}
			}
		}()
	}
	before := c.Stats()
	const chunk = 32
	sent := 0
	for range 2 {
		for base := 0; base < spec.NumTags; base += chunk {
			wrs := make([]verbs.SendWR, chunk)
			for i := range wrs {
				tag := spec.Tag(base + i)
				off := i * spec.FullLen
				spec.PutFull(f.MR.Bytes()[off:], forgedMark+uint64(tag))
				wrs[i] = verbs.SendWR{ID: uint64(i), Opcode: verbs.OpSendWithImm, Flags: verbs.Signaled,
					Imm: uint32(spec.AnswerImm(tag, forgedMark+uint64(tag))), SG: verbstest.SG(f.MR, off, spec.FullLen),
					AH: ah, RemoteQPN: dstQPN, RemoteQKey: qkey}
			}
			verbstest.PostSend(t, f.QP, wrs...)
			verbstest.PollN(t, f.SendCQ, chunk, 5*time.Second)
			sent += chunk
			time.Sleep(200 * time.Microsecond) // within the victim's receive queue: overflow would test nothing
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for c.Stats().Forged-before.Forged == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	close(stop)
	wg.Wait()
	if p := callErr.Load(); p != nil {
		t.Fatalf("victim call failed: %v", *p)
	}
	st := c.Stats()
	t.Logf("sent %d forged answers with the session's Q_Key; victim: %d calls, %d forged values accepted, %d dropped by the source check, %d regressions",
		sent, calls.Load(), accepted.Load(), st.Forged-before.Forged, st.Regressions-before.Regressions)
	if accepted.Load() != 0 {
		t.Errorf("%d forged values accepted", accepted.Load())
	}
	if st.Forged == before.Forged {
		t.Error("the source check counted no forged answer")
	}
	if calls.Load() == 0 {
		t.Error("the victim made no call")
	}
}
