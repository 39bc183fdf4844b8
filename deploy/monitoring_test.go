package deploy_test

import (
	"bytes"
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/seqd/seqd/modes"
	"github.com/seqd/seqd/spec"
)

// lossMetric names the counters of requests a mode did not answer:
// seqd_<mode>_drops_total, and for atomics (which the NIC answers)
// seqd_atomics_breaches_total.
var lossMetric = regexp.MustCompile(`^seqd_[a-z0-9_]+_(drops|breaches)_total$`)

// modeOnly returns the names that mode exports and no other mode does
// (seqd_herd_*, ...; not seqd_verbs_* or seqd_service_time_seconds).
func modeOnly(byMode map[string]map[string]bool, mode string) []string {
	var own []string
	for n := range byMode[mode] {
		shared := false
		for _, m := range modes.All {
			shared = shared || (m != mode && byMode[m][n])
		}
		if !shared {
			own = append(own, n)
		}
	}
	sort.Strings(own)
	return own
}

// dashboardRows returns the dashboard's rows, by title, each with the
// exprs of the panels under it (up to the next row).
func dashboardRows(t *testing.T) map[string][]string {
	t.Helper()
	b, err := os.ReadFile("grafana/seqd-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.NewDecoder(bytes.NewReader(b)).Decode(&d); err != nil {
		t.Fatal(err)
	}
	rows := map[string][]string{}
	row := ""
	for _, p := range d.Panels {
		if p.Type == "row" {
			row = p.Title
			rows[row] = []string{}
			continue
		}
		for _, tg := range p.Targets {
			rows[row] = append(rows[row], tg.Expr)
		}
	}
	return rows
}

// queries reports whether one of exprs names metric.
func queries(exprs []string, metric string) bool {
	re := regexp.MustCompile(`\b` + regexp.QuoteMeta(metric) + `\b`)
	return slices.ContainsFunc(exprs, re.MatchString)
}

// alertTests returns, by alert name, the exp_labels of every alert the
// promtool unit tests expect to fire.
func alertTests(t *testing.T) map[string][]map[string]string {
	t.Helper()
	b, err := os.ReadFile("prometheus/seqd-alerts_test.yml")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string `json:"alertname"`
				ExpAlerts []struct {
					ExpLabels map[string]string `json:"exp_labels"`
				} `json:"exp_alerts"`
			} `json:"alert_rule_test"`
		} `json:"tests"`
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	fired := map[string][]map[string]string{}
	for _, tc := range f.Tests {
		for _, a := range tc.AlertRuleTest {
			for _, e := range a.ExpAlerts {
				fired[a.Alertname] = append(fired[a.Alertname], e.ExpLabels)
			}
		}
	}
	return fired
}

// TestEveryModeIsMonitored (issue 29): the drops alert watched spec-s0
// only, and the dashboard had no fasst, darpc or rfp row. Every mode of
// the registry (modes.All) must export a loss counter (drops, or
// atomics' breaches), have an alerting rule labelled with the mode that
// queries it, a promtool unit test in which that rule fires, and a
// dashboard row "Mode <mode>" that shows its loss and throughput; every
// series only that mode exports must be on the dashboard.
func TestEveryModeIsMonitored(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts seqd in every mode")
	}
	byMode := exportedByMode(t)
	rules := alertRules(t, "prometheus/seqd-alerts.yml")
	fired := alertTests(t)
	rows := dashboardRows(t)
	var all []string
	for _, exprs := range rows {
		all = append(all, exprs...)
	}
	for _, mode := range modes.All {
		own := modeOnly(byMode, mode)
		var loss []string
		for _, n := range own {
			if lossMetric.MatchString(n) {
				loss = append(loss, n)
			}
		}
		if len(loss) == 0 {
			t.Errorf("mode %s exports no drops or breaches counter of its own (it exports %v)", mode, own)
			continue
		}
		// The alerts and rows watch seqd_<Metrics>_*, the table's prefix.
		if f, _ := spec.Facts(mode); !slices.ContainsFunc(loss, func(n string) bool { return strings.HasPrefix(n, "seqd_"+f.Metrics+"_") }) {
			t.Errorf("mode %s: no loss counter under its metrics prefix seqd_%s_ (spec.ModeTable): %v", mode, f.Metrics, loss)
		}
		row, ok := rows["Mode "+mode]
		if !ok {
			t.Errorf("the dashboard has no row %q", "Mode "+mode)
		}
		for _, n := range loss {
			var alert *rule
			for i, r := range rules {
				if r.Labels["mode"] == mode && queries([]string{r.Expr}, n) {
					alert = &rules[i]
				}
			}
			if alert == nil {
				t.Errorf("mode %s: no alerting rule labelled mode: %s queries %s", mode, mode, n)
			} else if !slices.ContainsFunc(fired[alert.Alert], func(l map[string]string) bool { return l["mode"] == mode }) {
				t.Errorf("mode %s: no promtool test (seqd-alerts_test.yml) fires %s with mode: %s", mode, alert.Alert, mode)
			}
			if ok && !queries(row, n) {
				t.Errorf("mode %s: the dashboard row %q does not show %s", mode, "Mode "+mode, n)
			}
		}
		for _, n := range own {
			if strings.HasSuffix(n, "_served_total") && ok && !queries(row, n) {
				t.Errorf("mode %s: the dashboard row %q does not show %s", mode, "Mode "+mode, n)
			}
			if !queries(all, strings.TrimSuffix(n, "_bucket")) {
				t.Errorf("mode %s exports %s, which no dashboard panel shows", mode, n)
			}
		}
	}
}

// TestSeqdPDAndAdminAreMonitored (issue 29): seqd-pd had no alert and no
// panel though seqd_pd_tso_errors_total reached 8,438 in one failover.
// Its errors, refused ranges, stream count and latency, and the admin
// plane's refusals and failed secret reloads, each have an alert that a
// promtool unit test fires; seqd-pd's have a dashboard row.
func TestSeqdPDAndAdminAreMonitored(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts seqd and seqd-pd")
	}
	byMode := exportedByMode(t)
	rules := alertRules(t, "prometheus/seqd-alerts.yml")
	fired := alertTests(t)
	rows := dashboardRows(t)
	var pdRow []string
	for title, exprs := range rows {
		if strings.HasPrefix(title, "seqd-pd") {
			pdRow = exprs
		}
	}
	if pdRow == nil {
		t.Error("the dashboard has no seqd-pd row")
	}
	for _, x := range []struct {
		metric string
		pd     bool
	}{
		{"seqd_pd_tso_errors_total", true},
		{"seqd_pd_tso_refused_total", true},
		{"seqd_pd_tso_streams_total", true},
		{"seqd_pd_tso_handle_duration_seconds_bucket", true},
		{"seqd_pd_secret_reload_errors_total", true},
		{"seqd_admin_advance_refused_total", false},
		{"seqd_admin_admission_refused_total", false},
		{"seqd_admin_secret_reload_errors_total", false},
	} {
		src := "seqd"
		if x.pd {
			src = "seqd-pd"
		}
		found := false
		for _, names := range byMode {
			found = found || names[x.metric]
		}
		if x.pd && !byMode["seqd-pd"][x.metric] || !found {
			t.Errorf("%s does not export %s", src, x.metric)
		}
		var alert *rule
		for i, r := range rules {
			if queries([]string{r.Expr}, x.metric) {
				alert = &rules[i]
			}
		}
		if alert == nil {
			t.Errorf("no alerting rule queries %s", x.metric)
		} else if len(fired[alert.Alert]) == 0 {
			t.Errorf("%s (on %s): no promtool test in seqd-alerts_test.yml fires it", alert.Alert, x.metric)
		}
		if x.pd && !queries(pdRow, x.metric) {
			t.Errorf("the seqd-pd dashboard row does not show %s", x.metric)
		}
	}
}

// TestEveryAlertIsTested: every alerting rule fires in a promtool unit
// test (per mode for the rules labelled with one), and its runbook is a
// heading of docs/operations.md.
func TestEveryAlertIsTested(t *testing.T) {
	fired := alertTests(t)
	guide, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	for _, line := range strings.Split(string(guide), "\n") {
		if h, ok := strings.CutPrefix(line, "#"); ok {
			h = strings.ToLower(strings.TrimSpace(strings.TrimLeft(h, "#")))
			h = regexp.MustCompile(`[^a-z0-9 _-]`).ReplaceAllString(h, "")
			anchors[strings.ReplaceAll(h, " ", "-")] = true
		}
	}
	for _, r := range alertRules(t, "prometheus/seqd-alerts.yml") {
		rb := r.Annotations["runbook"]
		if a, ok := strings.CutPrefix(rb, "docs/operations.md#"); !ok || !anchors[a] {
			t.Errorf("%s: runbook %q is no heading of docs/operations.md", ruleKey(r), rb)
		}
		if !slices.ContainsFunc(fired[r.Alert], func(l map[string]string) bool {
			return r.Labels["mode"] == "" || l["mode"] == r.Labels["mode"]
		}) {
			t.Errorf("%s: no test in seqd-alerts_test.yml expects it to fire", ruleKey(r))
		}
	}
}
