package main

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/seqd/seqd/admin"
	"github.com/seqd/seqd/admin/adminpb"
	"github.com/seqd/seqd/admin/admintest"
	seqd "github.com/seqd/seqd/server"
	"github.com/seqd/seqd/spec"
)

// statusText runs seqctl status against a fake backend reporting st and
// returns its output.
func statusText(t *testing.T, st *adminpb.StatusResponse) string {
	t.Helper()
	_, addr := admintest.Start(t, admin.Config{Logger: slog.New(slog.DiscardHandler)}, admintest.NewBackend(st))
	code, out, errs := seqctl("-admin", addr, "-timeout", "30s", "status")
	if code != exitOK {
		t.Fatalf("status: exit %d, stderr %q", code, errs)
	}
	return out
}

// TestStatusReadable: status shows the current value and the mark as the
// server's format reads them (times and a duration in hybrid, counts in
// counter), not as raw 64-bit numbers.
func TestStatusReadable(t *testing.T) {
	ms := time.Date(2026, 11, 28, 1, 50, 34, 708e6, time.UTC).UnixMilli()
	for _, tc := range []struct {
		name              string
		format            string
		current, mark     uint64
		cur, mk, headroom string // regular expressions of the rows
	}{
		{"hybrid", "hybrid", spec.HybridValue(ms, 3), spec.HybridFloor(ms + 3000),
			`2026-11-28T01:50:34\.708Z\+3  \(` + fmt.Sprint(spec.HybridValue(ms, 3)) + `\)`,
			`2026-11-28T01:50:37\.708Z  \(` + fmt.Sprint(spec.HybridFloor(ms+3000)) + `\)`, `2\.999s`},
		// A fresh hybrid server: nothing handed out; the headroom runs from
		// now to the mark (a minute ahead of this host's clock here).
		{"hybrid-fresh", "hybrid", 0, spec.HybridFloor(time.Now().Add(time.Minute).UnixMilli()),
			`0  \(none handed out yet\)`, `20\d\d-\d\d-\d\dT[0-9:.]+Z  \(\d+\)`, `(59|1m0)\.\d+s  \(from now: none handed out yet\)`},
		{"counter", "counter", 5, 1048576, `5`, `1048576`, `1048571 values`},
		{"counter-fresh", "counter", 0, 1048576, `0  \(none handed out yet\)`, `1048576`, `1048576 values`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := proto.Clone(testStatus).(*adminpb.StatusResponse)
			st.Format, st.Current, st.PersistedMark = tc.format, tc.current, tc.mark
			out := statusText(t, st)
			for _, re := range []string{"\ncurrent +" + tc.cur + "\n", "\npersisted_mark +" + tc.mk + "\n", "\nheadroom +" + tc.headroom + "\n"} {
				if !matches(re, out) {
					t.Errorf("status lacks /%s/", re)
				}
			}
			if t.Failed() {
				t.Logf("output:\n%s", out)
			}
		})
	}
}

// TestGetCounterFormat: get on a counter-format server prints the values
// as counts, with no physical time (1970) or logical part.
func TestGetCounterFormat(t *testing.T) {
	addr := runSeqd(t, seqd.Config{Format: "counter"})
	code, out, errs := seqctl("-admin", addr, "get", "-n", "2")
	if code != exitOK {
		t.Fatalf("get: exit %d: %s", code, errs)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || strings.Contains(out, "physical") || strings.Contains(out, "1970") {
		t.Fatalf("get -n 2 on a counter server = %q, want two bare values", out)
	}
	code, out, errs = seqctl("-admin", addr, "get", "-o", "json")
	var one map[string]any
	if code != exitOK || json.Unmarshal([]byte(out), &one) != nil {
		t.Fatalf("get -o json: exit %d %q %q", code, out, errs)
	}
	if one["format"] != "counter" || one["physical"] != nil || one["logical"] != nil {
		t.Fatalf("get -o json on a counter server = %v", one)
	}
}

// TestAdvanceReadable: advance takes a value in the server's units (a
// time or +DURATION in hybrid, +N in counter), refuses a value at or
// below the current one in those units, and prints the result in them.
func TestAdvanceReadable(t *testing.T) {
	t.Run("hybrid", func(t *testing.T) {
		addr := runSeqd(t, seqd.Config{})
		if code, _, errs := seqctl("-admin", addr, "get"); code != exitOK {
			t.Fatalf("get: %s", errs)
		}
		code, out, errs := seqctl("-admin", addr, "advance", "+2s")
		if code != exitOK || !matches(`^advanced 20\d\d-[0-9T:.\-]+Z(\+\d+)? \(\d+\) -> 20\d\d-[0-9T:.\-]+Z(\+\d+)? \(\d+\) \(every later value is above 20`, out) {
			t.Fatalf("advance +2s = %d %q %q", code, out, errs)
		}
		code, _, errs = seqctl("-admin", addr, "advance", "2001-01-01T00:00:00Z")
		if code != exitFail || !strings.Contains(errs, "VALUE 2001-01-01T00:00:00.000Z (") ||
			!strings.Contains(errs, "is not above the current value 20") || !strings.Contains(errs, "+DURATION") {
			t.Fatalf("advance to the past = %d %q", code, errs)
		}
		code, _, errs = seqctl("-admin", addr, "advance", "soon")
		if code != exitUsage || !strings.Contains(errs, "RFC 3339") {
			t.Fatalf("advance soon = %d %q", code, errs)
		}
	})
	t.Run("counter", func(t *testing.T) {
		addr := runSeqd(t, seqd.Config{Format: "counter"})
		if code, _, errs := seqctl("-admin", addr, "get", "-n", "3"); code != exitOK {
			t.Fatalf("get: %s", errs)
		}
		code, out, errs := seqctl("-admin", addr, "advance", "+100")
		if code != exitOK || !matches(`^advanced 3 -> 10\d \(every later value is above 103\)\n$`, out) {
			t.Fatalf("advance +100 = %d %q %q", code, out, errs)
		}
		code, _, errs = seqctl("-admin", addr, "advance", "50")
		if code != exitFail || !matches(`VALUE 50 is not above the current value 10\d:`, errs) || !strings.Contains(errs, "+N") {
			t.Fatalf("advance 50 = %d %q", code, errs)
		}
	})
}

// TestErrorsOnce: each error says what failed once, in flag terms, with
// the way out: no doubled kind ("InvalidArgument: invalid argument"), no
// Go names (strconv.ParseUint), no doubled prefix ("admin: admin:").
func TestErrorsOnce(t *testing.T) {
	_, _, addr := startServer(t)
	for _, tc := range []struct {
		args []string
		want string
		not  []string
	}{
		{[]string{"-admin", addr, "set-mode", "foo"}, `seqctl set-mode: unknown mode "foo": want ` + spec.ModeList(spec.Modes),
			[]string{"InvalidArgument", `["`}},
		{[]string{"decode", "zz"}, `seqctl decode: timestamp "zz": want a 64-bit value`, []string{"strconv"}},
		{[]string{"-admin", "bad", "status"}, `seqctl status: -admin: bad address: "bad": want host:port`, []string{"admin: admin", "entry 1"}},
		{[]string{"-admin", "127.0.0.1:1,127.0.0.1:2", "status"}, "(is seqd running at -admin 127.0.0.1:1,127.0.0.1:2? Start it",
			[]string{"unavailable: dial", "; unavailable"}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			_, out, errs := seqctl(append([]string{"-timeout", "30s"}, tc.args...)...)
			if !strings.Contains(errs, tc.want) {
				t.Errorf("stderr %q lacks %q (stdout %q)", errs, tc.want, out)
			}
			for _, n := range tc.not {
				if strings.Contains(errs, n) {
					t.Errorf("stderr %q has %q", errs, n)
				}
			}
		})
	}
}
