package modes

import (
	"context"
	"log/slog"
	"testing"

	"github.com/seqd/seqd/internal/claimtest"
	"github.com/seqd/seqd/oracle"
	"github.com/seqd/seqd/spec"
)

// TestStartFailureIsAnError: a mode whose worker cannot be built (here:
// more response QPs than a worker holds) fails to start with an error,
// and releases what it built; it does not panic. Base: every worker-pool
// mode's newWorker returned nil and its deferred cleanup then called
// Close on the nil worker.
func TestStartFailureIsAnError(t *testing.T) {
	for _, mode := range spec.Modes {
		t.Run(mode, func(t *testing.T) {
			o, err := oracle.Open(context.Background(), oracle.Config{Format: spec.FormatCounter, Dir: t.TempDir(), Init: true})
			if err != nil {
				t.Fatal(err)
			}
			defer o.Close()
			dev := claimtest.OpenSoft(t, "")
			defer func() {
				if p := recover(); p != nil {
					t.Fatalf("%s with 1000 response QPs per worker panicked: %v", mode, p)
				}
			}()
			s, err := New(context.Background(), Config{Device: dev, Oracle: o, RespQPs: 1000, Logger: slog.New(slog.DiscardHandler)}, mode)
			if err == nil {
				s.Close()
				t.Logf("%s takes no response QPs: started", mode)
			}
		})
	}
}
