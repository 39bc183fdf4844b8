package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/seqd/seqd/admin/adminclient"
	"github.com/seqd/seqd/ha/hatest"
	seqd "github.com/seqd/seqd/server"
)

// TestSeqdGroupVisible: a three-member HA group on a real etcd, reached
// with one -admin list by every command. Every member's status, a
// standby's too, reports role, version, format, mode, term, epoch and
// uptime, and members shows them; set-mode and transfer-leader sent to
// the list reach the leader.
func TestSeqdGroupVisible(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and an HA group; skipped in -short")
	}
	c := hatest.Start(t, 1)
	ha := seqd.HAConfig{EtcdEndpoints: strings.Join(c.Endpoints(), ","), EtcdPrefix: "/seqctl-visible", LeaseTTL: time.Second}
	const version = "v9.9.9-visible"
	var addrs []string
	for range 3 {
		addrs = append(addrs, runSeqd(t, seqd.Config{HA: ha, Version: version}))
	}
	list := strings.Join(addrs, ",")

	// group waits until members shows a leader and two standbys that
	// agree with it on the term and the epoch, and returns them, leader
	// first.
	group := func() []member {
		t.Helper()
		var ms []member
		deadline := time.Now().Add(30 * time.Second)
		for {
			code, out, errs := seqctl("-admin", list, "-timeout", "5s", "members", "-o", "json")
			ms = nil
			if code == exitOK && json.Unmarshal([]byte(out), &ms) == nil && len(ms) == 3 && agree(ms) {
				return ms
			}
			if time.Now().After(deadline) {
				t.Fatalf("members -admin %s: no agreeing group within 30s: exit %d\n%s%s", list, code, out, errs)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	ms := group()
	lead := ms[0]
	for _, m := range ms {
		if m.Version != version || m.Format != "hybrid" || m.Mode != "spec-s0" || m.Term == 0 || m.Epoch == 0 || m.Uptime == 0 {
			t.Errorf("member %+v: want version %s, format hybrid, mode spec-s0, and a term, epoch and uptime", m, version)
		}
	}
	if code, out, errs := seqctl("-admin", list, "members"); code != exitOK ||
		!matches(`(?m)^ADDRESS +ROLE +LEADER +TERM +EPOCH +MODE +FORMAT +VERSION +UPTIME$`, out) ||
		!matches(fmt.Sprintf(`(?m)^%s +leader +%s +%d +%d +spec-s0 +hybrid +%s +\d`, lead.Address, lead.Address, lead.Term, lead.Epoch, version), out) ||
		!matches(fmt.Sprintf(`(?m)^%s +standby +%s +%d +%d +spec-s0 +hybrid +%s +\d`, ms[1].Address, lead.Address, lead.Term, lead.Epoch, version), out) {
		t.Errorf("members (text) = %d\n%s%s", code, out, errs)
	}
	t.Logf("seqctl -admin %s members:\n%s", list, func() string { _, out, _ := seqctl("-admin", list, "members"); return out }())

	// status with the list, a standby first: the standby answers for
	// itself.
	standbyFirst := ms[1].Address + "," + ms[2].Address + "," + lead.Address
	st := statusOf(t, standbyFirst)
	if st.GetRole() != adminclient.RoleStandby || st.GetLeader() != lead.Address || st.GetVersion() != version ||
		st.GetFormat() != "hybrid" || st.GetMode() != "spec-s0" || st.GetTerm() != lead.Term || st.GetEpoch() != lead.Epoch || st.GetUptimeMs() == 0 {
		t.Errorf("standby status = %v, want version %s, format, mode, term %d, epoch %d, uptime", st, version, lead.Term, lead.Epoch)
	}
	if code, out, errs := seqctl("-admin", standbyFirst, "status"); code != exitOK || !matches(`(?m)^address +`+ms[1].Address+`$`, out) ||
		!matches(`(?m)^term +`+fmt.Sprint(lead.Term)+`$`, out) || !matches(`(?m)^uptime +\d`, out) {
		t.Errorf("status (text) = %d\n%s%s", code, out, errs)
	}
	if code, out, errs := seqctl("-admin", standbyFirst, "health"); code != exitOK || out != "SERVING\n" {
		t.Errorf("health = %d %q %q", code, out, errs)
	}

	// set-mode through the list: the leader switches, and a standby
	// reports the new epoch and mode (the leader published them before it
	// answered).
	if code, out, errs := seqctl("-admin", standbyFirst, "-timeout", "20s", "set-mode", "herd"); code != exitOK || !strings.Contains(out, "-> herd") {
		t.Fatalf("set-mode -admin %s = %d %q %q", standbyFirst, code, out, errs)
	}
	lst := statusOf(t, lead.Address)
	if lst.GetMode() != "herd" || lst.GetEpoch() == lead.Epoch {
		t.Fatalf("leader after set-mode: mode %s epoch %d (was %d)", lst.GetMode(), lst.GetEpoch(), lead.Epoch)
	}
	// A standby reads etcd at most every 100ms: it reports the new
	// epoch once its view is that recent.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		sst := statusOf(t, ms[1].Address)
		if sst.GetEpoch() == lst.GetEpoch() && sst.GetTerm() == lead.Term && sst.GetMode() == "herd" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("standby after set-mode: epoch %d term %d mode %s, want the leader's %d, %d and herd", sst.GetEpoch(), sst.GetTerm(), sst.GetMode(), lst.GetEpoch(), lead.Term)
		}
	}

	// transfer-leader through the list: a new leader in a new term, and
	// every member agrees on it again.
	code, out, errs := seqctl("-admin", standbyFirst, "-timeout", "20s", "transfer-leader")
	if code != exitOK || !strings.HasPrefix(out, "leader "+lead.Address+" -> ") {
		t.Fatalf("transfer-leader -admin %s = %d %q %q", standbyFirst, code, out, errs)
	}
	after := group()
	if after[0].Address == lead.Address || after[0].Term <= lead.Term {
		t.Errorf("after transfer-leader: %+v, want another leader in a later term than %d", after, lead.Term)
	}
}

// agree reports whether ms is a leader and standbys that name it, all on
// its term and epoch.
func agree(ms []member) bool {
	l := ms[0]
	if l.Role != adminclient.RoleLeader || l.Term == 0 || l.Epoch == 0 {
		return false
	}
	for _, m := range ms[1:] {
		if m.Role != adminclient.RoleStandby || m.Leader != l.Address || m.Term != l.Term || m.Epoch != l.Epoch {
			return false
		}
	}
	return true
}
