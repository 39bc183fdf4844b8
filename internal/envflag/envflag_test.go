package envflag

import (
	"flag"
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
