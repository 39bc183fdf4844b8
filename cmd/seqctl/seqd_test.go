package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/seqd/seqd/admin"
	"github.com/seqd/seqd/admin/adminclient"
	"github.com/seqd/seqd/admin/adminpb"
	"github.com/seqd/seqd/client"
	"github.com/seqd/seqd/ha/hatest"
	"github.com/seqd/seqd/internal/testpki"
	seqd "github.com/seqd/seqd/server"
	"github.com/seqd/seqd/spec"
	_ "github.com/seqd/seqd/verbs/soft"
)

// These tests run seqctl against a real seqd wired in-process by
// server, the library seqd's main calls with its flags.

// runSeqd starts seqd with c (listeners on free loopback ports unless c
// names its device and admin address) and returns its admin address. It
// stops at the end of the test.
func runSeqd(t *testing.T, c seqd.Config) string {
	t.Helper()
	if c.Device == "" {
		c.Device = "127.0.0.1:0"
	}
	if c.Admin == "" {
		c.Admin = "127.0.0.1:0"
	}
	c.Metrics = "off"
	if c.Data == "" {
		c.Data = t.TempDir()
		c.Init = true // a fresh data directory: a new deployment
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan seqd.Addrs, 1)
	done := make(chan struct{})
	var err error
	go func() {
		defer close(done)
		err = seqd.Run(ctx, c, slog.New(slog.DiscardHandler), func(a seqd.Addrs) { ready <- a })
	}()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case a := <-ready:
		return a.Admin
	case <-done:
		t.Fatalf("seqd: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("seqd did not come up within 30s")
	}
	return ""
}

// statusOf runs seqctl status -o json and decodes it.
func statusOf(t *testing.T, addr string, flags ...string) *adminpb.StatusResponse {
	t.Helper()
	code, out, errs := seqctl(append(append([]string{"-admin", addr}, flags...), "status", "-o", "json")...)
	if code != exitOK {
		t.Fatalf("status: exit %d: %s", code, errs)
	}
	var st adminpb.StatusResponse
	if err := protojson.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("status -o json: %v\n%s", err, out)
	}
	return &st
}

// timestamp gets one value through the client library.
func timestamp(t *testing.T, addr string) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, addr, client.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	defer c.Close()
	ts, err := c.GetTimestamp(ctx)
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	return uint64(ts)
}

func writeToken(t *testing.T, tok string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(p, []byte("# operators\n"+tok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestSeqdCommands(t *testing.T) {
	addr := runSeqd(t, seqd.Config{})
	code, out, errs := seqctl("-admin", addr, "status")
	if code != exitOK || !matches(`role +single\n`, out) || !matches(`leader +-\n`, out) || !matches(`mode +spec-s0\n`, out) {
		t.Fatalf("status = %d\n%s%s", code, out, errs)
	}
	if st := statusOf(t, addr); st.GetRole() != adminclient.RoleSingle {
		t.Errorf("status -o json role = %q, want single", st.GetRole())
	}
	if code, out, _ := seqctl("-admin", addr, "status", "-json"); code != exitOK || !matches(`"role":\s*"single"`, out) {
		t.Errorf("status -json = %d %s", code, out)
	}
	if code, _, errs := seqctl("-admin", addr, "status", "-o", "yaml"); code != exitUsage || !strings.Contains(errs, "want text or json") {
		t.Errorf("status -o yaml = %d %q, want a usage error", code, errs)
	}
	if code, out, errs := seqctl("-admin", addr, "health"); code != exitOK || out != "SERVING\n" {
		t.Errorf("health = %d %q %q", code, out, errs)
	}

	t.Run("advance", func(t *testing.T) {
		before := timestamp(t, addr)
		target := before + 1<<30
		code, out, errs := seqctl("-admin", addr, "advance", strconv.FormatUint(target, 10))
		if code != exitOK || !strings.Contains(out, "advanced ") {
			t.Fatalf("advance = %d %q %q", code, out, errs)
		}
		if got := timestamp(t, addr); got <= target {
			t.Fatalf("after advance %d the next value is %d", target, got)
		}
		if st := statusOf(t, addr); st.GetCurrent() <= target || st.GetPersistedMark() <= target {
			t.Errorf("after advance %d: current %d, mark %d", target, st.GetCurrent(), st.GetPersistedMark())
		}
		// Never backward; bounded forward; bad input is a usage error.
		if code, _, errs := seqctl("-admin", addr, "advance", strconv.FormatUint(target, 10)); code != exitFail || !strings.Contains(errs, "is not above the current value") {
			t.Errorf("advance backward = %d %q, want: not above the current value", code, errs)
		}
		far := target + 2*admin.DefaultMaxAdvance
		if code, _, errs := seqctl("-admin", addr, "advance", strconv.FormatUint(far, 10)); code != exitFail || !strings.Contains(errs, "InvalidArgument: 20") {
			t.Errorf("advance beyond the bound = %d %q, want InvalidArgument", code, errs)
		}
		if got := timestamp(t, addr); got >= far {
			t.Errorf("a refused advance moved the counter to %d", got)
		}
		for _, bad := range [][]string{{"advance"}, {"advance", "x"}, {"advance", "0"}, {"advance", "1", "2"}} {
			if code, _, _ := seqctl(append([]string{"-admin", addr}, bad...)...); code != exitUsage {
				t.Errorf("%q = %d, want usage error", bad, code)
			}
		}
	})

	t.Run("set-mode", func(t *testing.T) {
		if code, out, errs := seqctl("-admin", addr, "set-mode", "herd"); code != exitOK || !strings.Contains(out, "mode "+spec.ModeSpecS0+" -> "+spec.ModeHERD) {
			t.Fatalf("set-mode herd = %d %q %q", code, out, errs)
		}
		if m := statusOf(t, addr).GetMode(); m != "herd" {
			t.Fatalf("mode after set-mode herd = %q", m)
		}
		if code, _, errs := seqctl("-admin", addr, "set-mode", "nonsense"); code != exitUsage || !strings.Contains(errs, "unknown mode") {
			t.Errorf("set-mode nonsense = %d %q", code, errs)
		}
		if code, _, errs := seqctl("-admin", addr, "set-mode", "spec-s0"); code != exitOK {
			t.Fatalf("set-mode spec-s0 = %d %q", code, errs)
		}
	})

	t.Run("transfer-leader", func(t *testing.T) {
		if code, _, errs := seqctl("-admin", addr, "transfer-leader"); code != exitFail || !strings.Contains(errs, "FailedPrecondition: this server is not part of an HA group") {
			t.Errorf("transfer-leader without HA = %d %q, want FailedPrecondition", code, errs)
		}
	})
}

// TestSeqdAuthorisation: with -admin-token-file, mutating commands without
// credentials or with a token not in the file fail with Unauthenticated
// and change nothing; with the token they work.
func TestSeqdAuthorisation(t *testing.T) {
	tokens := writeToken(t, "s3cret-operator-token")
	addr := runSeqd(t, seqd.Config{Security: seqd.SecurityConfig{TokenFile: tokens}})
	wrong := writeToken(t, "not-the-operator-token")
	before := timestamp(t, addr)
	target := strconv.FormatUint(before+1<<40, 10)
	for _, tc := range []struct {
		name  string
		creds []string
		code  string
	}{
		{"no credentials", nil, "Unauthenticated: this call needs a bearer token or an allowed client certificate (pass the server's token with -token-file FILE"},
		{"wrong token", []string{"-token-file", wrong}, "Unauthenticated: invalid bearer token (pass"}, // an unknown token authenticates nobody
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, cmd := range [][]string{{"advance", target}, {"set-mode", "herd"}, {"transfer-leader"}} {
				args := append(append([]string{"-admin", addr}, tc.creds...), cmd...)
				if code, _, errs := seqctl(args...); code != exitFail || !strings.Contains(errs, tc.code) {
					t.Errorf("%q = %d %q, want %s", cmd, code, errs, tc.code)
				}
			}
			// Nothing changed: same mode, and the counter did not jump.
			if m := statusOf(t, addr).GetMode(); m != "spec-s0" {
				t.Errorf("mode is %q after refused set-mode", m)
			}
			if got := timestamp(t, addr); got >= before+1<<40 {
				t.Errorf("refused advance moved the counter: %d", got)
			}
		})
	}
	// Status and health need no credentials; the token authorises.
	if code, _, errs := seqctl("-admin", addr, "health"); code != exitOK {
		t.Errorf("health = %d %q", code, errs)
	}
	if code, _, errs := seqctl("-admin", addr, "-token-file", tokens, "advance", target); code != exitOK {
		t.Fatalf("advance with the token = %d %q", code, errs)
	}
	if got := timestamp(t, addr); got <= before+1<<40 {
		t.Fatalf("advance with the token: next value %d not above %s", got, target)
	}
}

// TestSeqdTLS: an admin plane on TLS answers seqctl with -tls-ca, and
// mutating calls with a token over TLS.
func TestSeqdTLS(t *testing.T) {
	p := testpki.New(t)
	cert, key := p.Issue(t, "seqd-server", true)
	tokens := writeToken(t, "tls-operator-token-0123")
	addr := runSeqd(t, seqd.Config{Security: seqd.SecurityConfig{TLSCert: cert, TLSKey: key, TokenFile: tokens}})
	tlsFlags := []string{"-tls-ca", p.CAFile()}
	if st := statusOf(t, addr, tlsFlags...); st.GetRole() != adminclient.RoleSingle {
		t.Errorf("status over TLS: role %q", st.GetRole())
	}
	if code, _, errs := seqctl("-admin", addr, "status"); code != exitFail {
		t.Errorf("plaintext status against TLS = %d %q, want failure", code, errs)
	}
	cur := statusOf(t, addr, tlsFlags...).GetCurrent()
	args := append([]string{"-admin", addr, "-token-file", tokens}, tlsFlags...)
	if code, out, errs := seqctl(append(args, "advance", fmt.Sprint(cur+1000))...); code != exitOK {
		t.Fatalf("advance over TLS = %d %q %q", code, out, errs)
	}
	if code, _, errs := seqctl("-admin", addr, "-tls-cert", cert, "status"); code != exitUsage || !strings.Contains(errs, "-tls-key") {
		t.Errorf("-tls-cert without -tls-key = %d %q", code, errs)
	}
}

// TestSeqdHA: two seqd instances of an HA group on a real etcd. status
// reports the roles and the leader; transfer-leader and advance sent to
// the standby follow its redirect to the leader.
func TestSeqdHA(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and an HA group; skipped in -short")
	}
	c := hatest.Start(t, 1)
	ha := seqd.HAConfig{EtcdEndpoints: strings.Join(c.Endpoints(), ","), EtcdPrefix: "/seqctl-test", LeaseTTL: time.Second}
	a := runSeqd(t, seqd.Config{HA: ha})
	b := runSeqd(t, seqd.Config{HA: ha})
	roles := func() (leader, standby string) {
		deadline := time.Now().Add(20 * time.Second)
		for time.Now().Before(deadline) {
			sa, sb := statusOf(t, a), statusOf(t, b)
			switch {
			case sa.GetRole() == adminclient.RoleLeader && sb.GetRole() == adminclient.RoleStandby && sb.GetLeader() == a:
				return a, b
			case sb.GetRole() == adminclient.RoleLeader && sa.GetRole() == adminclient.RoleStandby && sa.GetLeader() == b:
				return b, a
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Fatal("no leader and standby that names it within 20s")
		return "", ""
	}
	lead, standby := roles()
	if code, out, _ := seqctl("-admin", standby, "status"); code != exitOK || !matches(`role +standby\n`, out) || !strings.Contains(out, lead) {
		t.Errorf("standby status = %d\n%s", code, out)
	}
	code, out, errs := seqctl("-admin", standby, "-timeout", "20s", "transfer-leader")
	if code != exitOK || !strings.Contains(out, "leader "+lead+" -> "+standby) {
		t.Fatalf("transfer-leader via the standby = %d %q %q", code, out, errs)
	}
	newLead, _ := roles()
	if newLead != standby {
		t.Fatalf("after transfer the leader is %s, want %s", newLead, standby)
	}
	v := timestamp(t, lead+","+standby) // the client finds the leader
	if code, _, errs := seqctl("-admin", lead, "advance", fmt.Sprint(v+1<<30)); code != exitOK {
		t.Fatalf("advance via the (new) standby = %d %q", code, errs)
	}
	if got := timestamp(t, newLead); got <= v+1<<30 {
		t.Fatalf("after advance to %d the leader answered %d", v+1<<30, got)
	}
}
