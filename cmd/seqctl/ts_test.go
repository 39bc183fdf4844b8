package main

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/seqd/seqd/admin/adminclient"
	"github.com/seqd/seqd/ha/hatest"
	seqd "github.com/seqd/seqd/server"
)

func TestGetAndDecode(t *testing.T) {
	addr := runSeqd(t, seqd.Config{})
	code, out, errs := seqctl("-admin", addr, "get", "-o", "json")
	if code != exitOK {
		t.Fatalf("get: exit %d: %s", code, errs)
	}
	var one tsJSON
	if err := json.Unmarshal([]byte(out), &one); err != nil {
		t.Fatalf("get -o json: %v\n%s", err, out)
	}
	if age := time.Since(time.UnixMilli(one.PhysicalMs)); one.Timestamp == 0 || age < -time.Minute || age > time.Minute {
		t.Fatalf("get: %+v (physical %v from now)", one, age)
	}
	code, out, errs = seqctl("-admin", addr, "get", "-n", "3", "-o", "json")
	var three []tsJSON
	if code != exitOK || json.Unmarshal([]byte(out), &three) != nil || len(three) != 3 {
		t.Fatalf("get -n 3: exit %d %q %q", code, out, errs)
	}
	for _, ts := range three {
		if ts.Timestamp <= one.Timestamp {
			t.Fatalf("get -n 3 after %d answered %d", one.Timestamp, ts.Timestamp)
		}
	}
	// decode gives back what get printed, in both forms.
	code, out, _ = seqctl("decode", "-o", "json", fmt.Sprint(one.Timestamp))
	var dec tsJSON
	if code != exitOK || json.Unmarshal([]byte(out), &dec) != nil || !reflect.DeepEqual(dec, one) {
		t.Fatalf("decode -o json = %d %q, want %+v", code, out, one)
	}
	code, out, _ = seqctl("decode", fmt.Sprintf("%#x", one.Timestamp))
	if want := fmt.Sprintf("%d\tphysical %s\tlogical %d\n", one.Timestamp, one.Physical, *one.Logical); code != exitOK || out != want {
		t.Fatalf("decode = %d %q, want %q", code, out, want)
	}
	// A known value: 2026-11-23T22:06:06.730Z, logical 5.
	if code, out, _ = seqctl("decode", "470672098388869125"); !strings.Contains(out, "physical 2026-11-23T22:06:06.730Z\tlogical 5") {
		t.Fatalf("decode of a known value = %d %q", code, out)
	}
	for _, bad := range [][]string{{"decode"}, {"decode", "x"}, {"decode", "-o", "yaml", "1"}, {"get", "-n", "0"}} {
		if code, _, _ := seqctl(append([]string{"-admin", addr}, bad...)...); code != exitUsage {
			t.Errorf("%q: exit %d, want %d", bad, code, exitUsage)
		}
	}
}

func TestMembers(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and an HA group; skipped in -short")
	}
	single := runSeqd(t, seqd.Config{})
	if code, out, errs := seqctl("-admin", single, "members"); code != exitOK || !matches(single+` +single`, out) {
		t.Fatalf("members of a single instance = %d %q %q", code, out, errs)
	}
	c := hatest.Start(t, 1)
	ha := seqd.HAConfig{EtcdEndpoints: strings.Join(c.Endpoints(), ","), EtcdPrefix: "/seqctl-members", LeaseTTL: time.Second}
	a := runSeqd(t, seqd.Config{HA: ha})
	b := runSeqd(t, seqd.Config{HA: ha})
	gone := fmt.Sprintf("127.0.0.1:%d", hatest.FreePorts(t, 1)[0])
	var ms []member
	deadline := time.Now().Add(20 * time.Second)
	for {
		code, out, errs := seqctl("-admin", b+","+gone+","+a, "-timeout", "2s", "members", "-o", "json")
		ms = nil
		if code == exitOK && json.Unmarshal([]byte(out), &ms) == nil && len(ms) == 3 && ms[1].Role == adminclient.RoleStandby &&
			ms[1].Leader == ms[0].Address { // the standby has learned the leader

			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("members: exit %d %q %q", code, out, errs)
		}
		time.Sleep(50 * time.Millisecond)
	}
	lead, standby := ms[0], ms[1]
	if lead.Role != adminclient.RoleLeader || standby.Leader != lead.Address || ms[2].Address != gone || ms[2].Role != "unreachable" {
		t.Fatalf("members: %+v", ms)
	}
	if (lead.Address != a || standby.Address != b) && (lead.Address != b || standby.Address != a) {
		t.Fatalf("members: %+v, want %s and %s", ms, a, b)
	}
	// The text form lists the same, leader first; no leader is a failure.
	if code, out, _ := seqctl("members", a, b); code != exitOK || !matches(`(?s)ADDRESS.*\n`+lead.Address+` +leader.*\n`+standby.Address+` +standby +`+lead.Address, out) {
		t.Fatalf("members (text) = %d\n%s", code, out)
	}
	if code, _, errs := seqctl("-timeout", "1s", "members", gone); code != exitFail || !strings.Contains(errs, "no leader") {
		t.Fatalf("members of an unreachable address = %d %q", code, errs)
	}
}
