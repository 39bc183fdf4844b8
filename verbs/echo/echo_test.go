package echo_test

import (
	"testing"

	"github.com/seqd/seqd/verbs/echo"
	_ "github.com/seqd/seqd/verbs/soft"
)

// Both echoes complete exactly the round trips asked for, in batches and
// one at a time.
func TestEcho(t *testing.T) {
	for name, open := range map[string]func() (echo.Side, echo.Side, error){
		"soft": func() (echo.Side, echo.Side, error) { return echo.VerbsPair("soft", "127.0.0.1:0", nil) },
		"raw":  echo.RawPair,
	} {
		t.Run(name, func(t *testing.T) {
			cli, srv, err := open()
			if err != nil {
				t.Fatal(err)
			}
			defer cli.Close()
			defer srv.Close()
			const rounds = 10*echo.Window + 7
			n, el, err := echo.Run(cli, srv, rounds, 0)
			if err != nil || n != rounds || el <= 0 {
				t.Fatalf("Run: %d of %d round trips in %v: %v", n, rounds, el, err)
			}
			if _, err := echo.PingPong(cli, srv, 100, nil); err != nil {
				t.Fatalf("PingPong: %v", err)
			}
		})
	}
}

func TestVerbsPairUnknownProvider(t *testing.T) {
	if _, _, err := echo.VerbsPair("nope", "", nil); err == nil {
		t.Fatal("VerbsPair with an unknown provider succeeded")
	}
}
