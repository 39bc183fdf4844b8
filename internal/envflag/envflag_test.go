package envflag

import (
	"errors"
	"flag"
	"io"
	"strings"
	"testing"
	"time"
)

func TestApply(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	admin := fs.String("admin", "127.0.0.1:7070", "")
	eps := fs.String("etcd-endpoints", "", "")
	ttl := fs.Duration("lease-ttl", 3*time.Second, "")
	initf := fs.Bool("init", false, "")
	other := fs.String("other", "default", "")
	if err := fs.Parse([]string{"-admin", "0.0.0.0:7070"}); err != nil {
		t.Fatal(err)
	}
	set := map[string]bool{"admin": true}
	env := map[string]string{
		"SEQD_ADMIN":          "10.0.0.1:7070", // the command line wins
		"SEQD_ETCD_ENDPOINTS": "http://e:2379",
		"SEQD_LEASE_TTL":      "5s",
		"SEQD_INIT":           "true",
		"OTHER":               "no prefix",
	}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	if err := Apply(fs, "SEQD_", set, lookup); err != nil {
		t.Fatal(err)
	}
	if *admin != "0.0.0.0:7070" || *eps != "http://e:2379" || *ttl != 5*time.Second || !*initf || *other != "default" {
		t.Fatalf("admin %q eps %q ttl %v init %v other %q", *admin, *eps, *ttl, *initf, *other)
	}
	if !set["etcd-endpoints"] || !set["lease-ttl"] || !set["init"] || set["other"] {
		t.Fatalf("set = %v", set)
	}
	env = map[string]string{"SEQD_OTHER": "x", "SEQD_LEASE_TTL": "soon"}
	err := Apply(fs, "SEQD_", map[string]bool{}, lookup)
	if err == nil || !strings.Contains(err.Error(), "SEQD_LEASE_TTL") {
		t.Fatalf("bad value: %v", err)
	}
}

func TestName(t *testing.T) {
	for f, want := range map[string]string{"etcd-endpoints": "SEQD_ETCD_ENDPOINTS", "admin": "SEQD_ADMIN", "a.b-c": "SEQD_A_B_C"} {
		if got := Name("SEQD_", f); got != want {
			t.Errorf("Name(%q) = %q, want %q", f, got, want)
		}
	}
}

// TestUnknown: a mistyped SEQD_ADMN is an error, as a mistyped -config key
// is; seqd-pd's SEQD_PD_* and the Reserved test knobs are not.
func TestUnknown(t *testing.T) {
	fs := flag.NewFlagSet("seqd", flag.ContinueOnError)
	fs.String("admin", "", "")
	fs.String("floor", "", "internal: not for people")
	env := []string{"SEQD_ADMIN=x", "SEQD_PD_LISTEN=y", "SEQD_SOAK=1", "SEQD_RIG_STORM=1", "SEQD_TEST_ANY=1", "SEQD_FLAGS=-init", "PATH=/bin", "LOADGEN_X=1",
		// Kubernetes service links of the Service seqd.
		"SEQD_SERVICE_HOST=10.0.0.1", "SEQD_SERVICE_PORT=7070", "SEQD_PORT=tcp://10.0.0.1:7070", "SEQD_PORT_7070_TCP_ADDR=10.0.0.1"}
	if err := Unknown(fs, PrefixSeqd, env); err != nil {
		t.Fatalf("known and reserved variables: %v", err)
	}
	err := Unknown(fs, PrefixSeqd, append(env, "SEQD_ADMN=127.0.0.1:1", "SEQD_FLOOR=x"))
	if !errors.Is(err, ErrUnknown) || !strings.Contains(err.Error(), "SEQD_ADMN, SEQD_FLOOR") {
		t.Fatalf("SEQD_ADMN, SEQD_FLOOR (internal flags have no variable): %v", err)
	}
	// Under SEQD_PD_ the rule is the same; SEQD_PD_PID is reserved.
	pd := flag.NewFlagSet("seqd-pd", flag.ContinueOnError)
	pd.String("listen", "", "")
	if err := Unknown(pd, PrefixSeqdPD, []string{"SEQD_PD_LISTEN=x", "SEQD_ADMIN=y", "SEQD_PD_PID=1", "SEQD_PD_SERVICE_HOST=10.0.0.2", "SEQD_PD_PORT_3379_TCP=tcp://10.0.0.2:3379"}); err != nil {
		t.Fatal(err)
	}
	if err := Unknown(pd, PrefixSeqdPD, []string{"SEQD_PD_SEQ=x"}); !errors.Is(err, ErrUnknown) {
		t.Fatalf("SEQD_PD_SEQ: %v", err)
	}
}

// TestAlias: an old name sets the new flag and warns, from the command
// line and from its variable, and never overrides the new name.
func TestAlias(t *testing.T) {
	var warn strings.Builder
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	qp := fs.Int("queue-pairs", 0, "")
	v := fs.Bool("verbose", false, "")
	Alias(fs, "qps", "queue-pairs", &warn)
	Alias(fs, "v", "verbose", &warn)
	if _, err := Parse(fs, PrefixLoadgen, []string{"-qps", "3", "-v"}, nil); err != nil {
		t.Fatal(err)
	}
	if *qp != 3 || !*v || strings.Count(warn.String(), "deprecated") != 2 || !strings.Contains(warn.String(), "-qps is deprecated") {
		t.Fatalf("queue-pairs %d verbose %v, warnings %q", *qp, *v, warn.String())
	}
	fs = flag.NewFlagSet("loadgen", flag.ContinueOnError)
	qp = fs.Int("queue-pairs", 0, "")
	Alias(fs, "qps", "queue-pairs", &warn)
	if _, err := Parse(fs, PrefixLoadgen, nil, []string{"LOADGEN_QPS=5", "LOADGEN_QUEUE_PAIRS=7"}); err != nil || *qp != 7 {
		t.Fatalf("old and new variable: %d %v", *qp, err)
	}
	fs = flag.NewFlagSet("loadgen", flag.ContinueOnError)
	qp = fs.Int("queue-pairs", 0, "")
	Alias(fs, "qps", "queue-pairs", &warn)
	if _, err := Parse(fs, PrefixLoadgen, []string{"-queue-pairs", "2"}, []string{"LOADGEN_QPS=5"}); err != nil || *qp != 2 {
		t.Fatalf("command line and old variable: %d %v", *qp, err)
	}
}

// TestUsage: each flag with its variable, internal flags left out,
// aliases listed apart.
func TestUsage(t *testing.T) {
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	fs.String("json-file", "", "write JSON to `FILE`")
	fs.String("floor-server", "", "internal: a floor server")
	Alias(fs, "json", "json-file", io.Discard)
	var b strings.Builder
	Usage(&b, fs, PrefixLoadgen)
	got := b.String()
	for _, want := range []string{"  -json-file FILE\n", "env LOADGEN_JSON_FILE\n", "-json (use -json-file)"} {
		if !strings.Contains(got, want) {
			t.Errorf("usage lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "floor") {
		t.Errorf("usage lists an internal flag:\n%s", got)
	}
}
