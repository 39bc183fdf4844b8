// Package deploy_test checks the deployment files against the seqd they
// deploy: the example config documents every flag and starts seqd, the
// systemd unit verifies, the alert rules pass promtool (and their unit
// tests), and every seqd_* metric the dashboard and the rules query is one
// seqd exports. Tests that need a missing tool skip and say which.
package deploy_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/seqd/seqd/modes"
	"github.com/seqd/seqd/server"
	"github.com/seqd/seqd/spec"
	_ "github.com/seqd/seqd/verbs/soft"

	"sigs.k8s.io/yaml"
)

const stamp = "v0.0.0-deploy-test"

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

// binaries builds seqd, seqctl and seqd-pd once, stamped with stamp the way the
// Makefile stamps them.
func binaries(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		goBin, err := exec.LookPath("go")
		if err != nil {
			goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
		}
		binDir, buildErr = os.MkdirTemp("", "seqd-deploy-test-")
		if buildErr != nil {
			return
		}
		cmd := exec.Command(goBin, "build", "-ldflags", "-X github.com/seqd/seqd/internal/version.Version="+stamp,
			"-o", binDir+string(filepath.Separator), "github.com/seqd/seqd/cmd/seqd", "github.com/seqd/seqd/cmd/seqctl",
			"github.com/seqd/seqd/cmd/seqd-pd")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binDir
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

func TestVersionIsStamped(t *testing.T) {
	dir := binaries(t)
	for _, args := range [][]string{{"seqd", "--version"}, {"seqd", "-version"}, {"seqctl", "version"}} {
		out, err := exec.Command(filepath.Join(dir, args[0]), args[1:]...).CombinedOutput()
		if err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
		if want := args[0] + " " + stamp + "\n"; string(out) != want {
			t.Errorf("%v printed %q, want %q", args, out, want)
		}
	}
}

// seqdFlags returns the flag names `seqd -h` lists.
func seqdFlags(t *testing.T) []string {
	t.Helper()
	out, _ := exec.Command(filepath.Join(binaries(t), "seqd"), "-h").CombinedOutput() // -h exits non-zero
	var names []string
	for _, m := range regexp.MustCompile(`(?m)^  -([A-Za-z0-9][A-Za-z0-9._-]*)`).FindAllStringSubmatch(string(out), -1) {
		names = append(names, m[1])
	}
	if len(names) < 10 {
		t.Fatalf("seqd -h listed only %d flags:\n%s", len(names), out)
	}
	return names
}

// confLines returns the example config's name=value lines: active ones,
// and commented-out examples ("#name=value", "# name=value").
func confLines(t *testing.T) (active map[string]string, commented map[string]bool) {
	t.Helper()
	b, err := os.ReadFile("seqd.conf")
	if err != nil {
		t.Fatal(err)
	}
	active, commented = map[string]string{}, map[string]bool{}
	re := regexp.MustCompile(`^#\s?([a-z][a-z0-9-]*)=`)
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if m := re.FindStringSubmatch(line); m != nil {
			commented[m[1]] = true
			continue
		}
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("seqd.conf: %q is not name=value", line)
		}
		active[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	return active, commented
}

func TestExampleConfigDocumentsEveryFlag(t *testing.T) {
	flags := seqdFlags(t)
	active, commented := confLines(t)
	for _, f := range flags {
		if f == "config" || f == "version" {
			continue // not settable from the file
		}
		if _, ok := active[f]; !ok && !commented[f] {
			t.Errorf("deploy/seqd.conf does not document -%s (add a name=value line, or a commented #%s=example)", f, f)
		}
	}
	for k := range active {
		if !slices.Contains(flags, k) {
			t.Errorf("deploy/seqd.conf sets %q, which is not a seqd flag", k)
		}
	}
}

// unitSettings returns the unit's Key=Value settings (last one wins).
func unitSettings(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile("systemd/seqd.service")
	if err != nil {
		t.Fatal(err)
	}
	kv := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' || line[0] == '[' {
			continue
		}
		if k, v, ok := strings.Cut(line, "="); ok {
			kv[k] = v
		}
	}
	return kv
}

// cpuRange parses a CPUAffinity= list ("0-3 6,7").
func cpuRange(t *testing.T, s string) map[int]bool {
	t.Helper()
	set := map[int]bool{}
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' }) {
		lo, hi, isRange := strings.Cut(f, "-")
		a, err1 := strconv.Atoi(lo)
		b := a
		var err2 error
		if isRange {
			b, err2 = strconv.Atoi(hi)
		}
		if err1 != nil || err2 != nil || b < a {
			t.Fatalf("CPUAffinity %q: bad element %q", s, f)
		}
		for c := a; c <= b; c++ {
			set[c] = true
		}
	}
	return set
}

// TestUnitMatchesConfig checks what the unit and the config must agree on.
func TestUnitMatchesConfig(t *testing.T) {
	u := unitSettings(t)
	active, _ := confLines(t)
	for k, want := range map[string]string{
		"LimitMEMLOCK":    "infinity",
		"Restart":         "on-failure",
		"DynamicUser":     "yes",
		"StateDirectory":  "seqd",
		"NoNewPrivileges": "yes",
	} {
		if u[k] != want {
			t.Errorf("seqd.service: %s=%q, want %q", k, u[k], want)
		}
	}
	if !strings.Contains(u["ExecStart"], "-config /etc/seqd/seqd.conf") {
		t.Errorf("seqd.service: ExecStart %q does not read /etc/seqd/seqd.conf", u["ExecStart"])
	}
	if got, want := active["data"], "/var/lib/"+u["StateDirectory"]; got != want {
		t.Errorf("seqd.conf data=%q, but the unit's StateDirectory is %s", got, want)
	}
	if _, ok := u["PrivateDevices"]; ok {
		t.Errorf("seqd.service sets PrivateDevices, which hides /dev/infiniband from the ibv provider")
	}
	aff := cpuRange(t, u["CPUAffinity"])
	workers, _ := strconv.Atoi(active["workers"])
	cores := strings.Split(active["cores"], ",")
	if active["cores"] != "none" {
		if len(cores) != workers {
			t.Errorf("seqd.conf: %d cores for %d workers", len(cores), workers)
		}
		for _, c := range cores {
			n, err := strconv.Atoi(strings.TrimSpace(c))
			if err != nil || (n >= 0 && !aff[n]) {
				t.Errorf("seqd.conf core %q is outside the unit's CPUAffinity=%s", c, u["CPUAffinity"])
			}
		}
		if len(aff) <= workers {
			t.Errorf("CPUAffinity=%s leaves no core besides the %d workers'", u["CPUAffinity"], workers)
		}
	}
}

// TestExampleConfigStarts starts the real seqd with deploy/seqd.conf,
// overriding only what would collide on a shared machine (the listen
// addresses and the data directory) and, on machines with too few cores,
// the pinning.
func TestExampleConfigStarts(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts seqd")
	}
	active, _ := confLines(t)
	args := []string{"-config", "seqd.conf", "-data", t.TempDir(), "-init",
		"-admin", "127.0.0.1:0", "-metrics", "127.0.0.1:0", "-device", "127.0.0.1:0"}
	for _, c := range strings.Split(active["cores"], ",") {
		if n, err := strconv.Atoi(strings.TrimSpace(c)); err == nil && n >= runtime.NumCPU() {
			t.Logf("this machine has %d CPUs; running with -cores none instead of %s", runtime.NumCPU(), active["cores"])
			args = append(args, "-cores", "none")
			break
		}
	}
	cmd := exec.Command(filepath.Join(binaries(t), "seqd"), args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	serving := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		found := false
		for sc.Scan() {
			log.WriteString(sc.Text() + "\n")
			if !found && strings.Contains(sc.Text(), "seqd serving") {
				found = true
				serving <- true
			}
		}
		if !found {
			serving <- false
		}
	}()
	select {
	case ok := <-serving:
		if !ok {
			cmd.Wait()
			t.Fatalf("seqd -config seqd.conf exited without serving:\n%s", log.String())
		}
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("seqd -config seqd.conf not serving after 30s")
	}
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("seqd exited with %v on SIGTERM:\n%s", err, log.String())
	}
}

func TestSystemdUnitVerifies(t *testing.T) {
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze not installed (Debian package systemd)")
	}
	b, err := os.ReadFile("systemd/seqd.service")
	if err != nil {
		t.Fatal(err)
	}
	// verify checks that ExecStart's binary exists: point it at the one
	// just built.
	unit := strings.ReplaceAll(string(b), "/usr/local/bin/seqd ", filepath.Join(binaries(t), "seqd")+" ")
	path := filepath.Join(t.TempDir(), "seqd.service")
	if err := os.WriteFile(path, []byte(unit), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(sa, "verify", path).CombinedOutput()
	if err != nil {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
	// verify exits 0 on warnings such as unknown keys: fail on any line
	// about our unit.
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, "seqd.service") {
			t.Errorf("systemd-analyze verify: %s", line)
		}
	}
	if out, err := exec.Command(sa, "security", "--offline=yes", path).CombinedOutput(); err == nil {
		if m := regexp.MustCompile(`Overall exposure level for \S+: (\S+ \S+)`).FindSubmatch(out); m != nil {
			t.Logf("systemd-analyze security: exposure %s", m[1])
		}
	}
}

func TestAlertRulesPromtool(t *testing.T) {
	pt, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not installed (Debian package prometheus)")
	}
	for _, args := range [][]string{
		{"check", "rules", "prometheus/seqd-alerts.yml"},
		{"test", "rules", "prometheus/seqd-alerts_test.yml"},
	} {
		out, err := exec.Command(pt, args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// rule is one alerting rule of a rules file.
type rule struct {
	Alert       string            `json:"alert"`
	Expr        string            `json:"expr"`
	For         string            `json:"for"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

// alertRules decodes the rules file's alerting rules, strictly.
func alertRules(t *testing.T, path string) []rule {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []rule `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.UnmarshalStrict(b, &f); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var rules []rule
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			rules = append(rules, r)
		}
	}
	return rules
}

// ruleKey names a rule: its alert, and its mode label when it has one
// (SeqdDropsRising has a rule per mode).
func ruleKey(r rule) string {
	if m := r.Labels["mode"]; m != "" {
		return r.Alert + "{mode=" + m + "}"
	}
	return r.Alert
}

// ruleExprs returns the expr of every alerting rule, by ruleKey.
func ruleExprs(t *testing.T, path string) map[string]string {
	t.Helper()
	exprs := map[string]string{}
	for _, r := range alertRules(t, path) {
		k := ruleKey(r)
		if _, dup := exprs[k]; dup {
			t.Errorf("%s: two rules %s", path, k)
		}
		exprs[k] = r.Expr
	}
	return exprs
}

var metricName = regexp.MustCompile(`\bseqd_[a-zA-Z0-9_]+`)

// exported scrapes an in-process seqd (the same wiring as cmd/seqd) in
// every mode, since each mode exports only its own series, with an admin
// token file (so that the secret reload series exist), and seqd-pd in
// front of the fasst one. It returns the metric names seen, by mode, and
// seqd-pd's under "seqd-pd".
func exported(t *testing.T) map[string]map[string]bool {
	t.Helper()
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte("deploy-test-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	byMode := map[string]map[string]bool{}
	for _, mode := range modes.All {
		ctx, cancel := context.WithCancel(context.Background())
		ready := make(chan server.Addrs, 1)
		done := make(chan error, 1)
		c := server.Config{Data: t.TempDir(), Init: true, Admin: "127.0.0.1:0", Metrics: "127.0.0.1:0", Device: "127.0.0.1:0", Mode: mode}
		c.Security.TokenFile = tokens
		go func() {
			done <- server.Run(ctx, c, slog.New(slog.NewTextHandler(io.Discard, nil)), func(a server.Addrs) { ready <- a })
		}()
		var a server.Addrs
		select {
		case a = <-ready:
		case err := <-done:
			cancel()
			t.Fatalf("seqd -mode %s: %v", mode, err)
		case <-time.After(30 * time.Second):
			cancel()
			t.Fatalf("seqd -mode %s: not ready after 30s", mode)
		}
		names, err := scrape("http://" + a.Metrics + "/metrics")
		if err == nil && mode == spec.ModeFaSST {
			byMode["seqd-pd"], err = scrapeSeqdPD(t, a.Admin, tokens)
		}
		cancel()
		if derr := <-done; derr != nil {
			t.Fatalf("seqd -mode %s: %v", mode, derr)
		}
		if err != nil {
			t.Fatalf("seqd -mode %s: %v", mode, err)
		}
		byMode[mode] = names
		t.Logf("mode %s: %d metric names", mode, len(names))
	}
	if byMode["seqd-pd"] == nil {
		t.Fatalf("no mode %s among %v: seqd-pd was not scraped", spec.ModeFaSST, modes.All)
	}
	return byMode
}

// scrape returns the metric names of a /metrics page.
func scrape(url string) (map[string]bool, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	names := map[string]bool{}
	for _, line := range strings.Split(string(body), "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		if i := strings.IndexAny(line, "{ "); i > 0 {
			names[line[:i]] = true
		}
	}
	return names, nil
}

// scrapeSeqdPD runs the seqd-pd binary in front of the seqd at admin
// (mode fasst), with a token file, and returns the metric names it
// exports.
func scrapeSeqdPD(t *testing.T, admin, tokens string) (map[string]bool, error) {
	t.Helper()
	cmd := exec.Command(filepath.Join(binaries(t), "seqd-pd"), "-admin", admin, "-listen", "127.0.0.1:0",
		"-metrics", "127.0.0.1:0", "-token-file", tokens)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	}()
	var log strings.Builder
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sent := false
		for sc.Scan() {
			log.WriteString(sc.Text() + "\n")
			if m := regexp.MustCompile(`seqd-pd metrics.* listen=(\S+)`).FindStringSubmatch(sc.Text()); m != nil && !sent {
				addr <- m[1]
				sent = true
			}
		}
		if !sent {
			close(addr)
		}
	}()
	select {
	case a, ok := <-addr:
		if !ok {
			return nil, fmt.Errorf("seqd-pd exited before serving metrics")
		}
		return scrape("http://" + a + "/metrics")
	case <-time.After(30 * time.Second):
		return nil, fmt.Errorf("seqd-pd: no metrics listener after 30s")
	}
}

var (
	exportedOnce  sync.Once
	exportedNames map[string]bool
	exportedModes map[string]map[string]bool
)

// exportedByMode is exported's answer, scraped once.
func exportedByMode(t *testing.T) map[string]map[string]bool {
	t.Helper()
	exportedOnce.Do(func() {
		exportedModes = exported(t)
		exportedNames = map[string]bool{}
		for _, names := range exportedModes {
			for n := range names {
				exportedNames[n] = true
			}
		}
	})
	if exportedModes == nil {
		t.Fatal("scraping seqd failed")
	}
	return exportedModes
}

// checkMetrics fails for each metric referenced in exprs that seqd does not
// export. Names under seqd_ha_ are exported only when seqd runs with etcd;
// they pass when a Go source file of the repository defines them.
func checkMetrics(t *testing.T, what string, exprs map[string]string) {
	t.Helper()
	exportedByMode(t)
	var defined string
	keys := make([]string, 0, len(exprs))
	for k := range exprs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		for _, m := range metricName.FindAllString(exprs[k], -1) {
			if exportedNames[m] {
				continue
			}
			if strings.HasPrefix(m, "seqd_ha_") {
				if defined == "" {
					defined = goSources(t)
				}
				if strings.Contains(defined, `"`+m+`"`) {
					t.Logf("%s %q: %s is exported only with HA (etcd); defined in the sources", what, k, m)
					continue
				}
			}
			t.Errorf("%s %q queries %s, which seqd does not export", what, k, m)
		}
	}
}

// goSources concatenates the repository's non-test Go files.
func goSources(t *testing.T) string {
	var sb strings.Builder
	filepath.WalkDir("..", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "bin" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if strings.HasSuffix(p, ".go") && !strings.HasSuffix(p, "_test.go") {
			b, _ := os.ReadFile(p)
			sb.Write(b)
		}
		return nil
	})
	return sb.String()
}

func TestAlertRulesUseExportedMetrics(t *testing.T) {
	exprs := ruleExprs(t, "prometheus/seqd-alerts.yml")
	for _, want := range []string{"SeqdDown", "SeqdPersistStalling", "SeqdClockStepBack", "SeqdDropsRising{mode=spec-s0}", "SeqdLeaderFlapping", "SeqdMarkHeadroomLow"} {
		if exprs[want] == "" {
			t.Errorf("no alert %s", want)
		}
	}
	checkMetrics(t, "alert", exprs)
}

type dashboard struct {
	Title         string  `json:"title"`
	UID           string  `json:"uid"`
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []panel `json:"panels"`
	Templating    struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	} `json:"datasource"`
	GridPos struct{ H, W, X, Y int } `json:"gridPos"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
}

func TestDashboard(t *testing.T) {
	b, err := os.ReadFile("grafana/seqd-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("seqd-dashboard.json: %v", err)
	}
	if d.Title == "" || d.UID == "" || d.SchemaVersion < 30 {
		t.Errorf("title %q uid %q schemaVersion %d: want a titled dashboard with a uid, schema 30 or later", d.Title, d.UID, d.SchemaVersion)
	}
	vars := map[string]bool{}
	for _, v := range d.Templating.List {
		vars[v.Name] = true
	}
	for _, v := range []string{"DS_PROMETHEUS", "job", "instance"} {
		if !vars[v] {
			t.Errorf("no template variable %s", v)
		}
	}
	ids := map[int]bool{}
	exprs := map[string]string{}
	titles := map[string]bool{}
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d used twice", p.ID)
		}
		ids[p.ID] = true
		titles[p.Title] = true
		if p.GridPos.W <= 0 || p.GridPos.H <= 0 || p.GridPos.X+p.GridPos.W > 24 {
			t.Errorf("panel %q: gridPos %+v outside the 24-column grid", p.Title, p.GridPos)
		}
		if p.Type == "row" || p.Type == "text" {
			continue
		}
		if p.Datasource == nil || p.Datasource.UID != "${DS_PROMETHEUS}" {
			t.Errorf("panel %q: datasource is not ${DS_PROMETHEUS}", p.Title)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no queries", p.Title)
		}
		refs := map[string]bool{}
		for _, tg := range p.Targets {
			if tg.Expr == "" || refs[tg.RefID] {
				t.Errorf("panel %q: empty expr or duplicate refId %q", p.Title, tg.RefID)
			}
			refs[tg.RefID] = true
			if strings.Count(tg.Expr, "(") != strings.Count(tg.Expr, ")") || strings.Count(tg.Expr, "{") != strings.Count(tg.Expr, "}") {
				t.Errorf("panel %q: unbalanced expr %q", p.Title, tg.Expr)
			}
			exprs[p.Title+"/"+tg.RefID] = tg.Expr
		}
	}
	for _, want := range []string{"Throughput per mode", "Batch size", "Speculation misses", "Drops by reason", "Mark save latency", "Saves, stalls and errors"} {
		if !titles[want] {
			t.Errorf("no panel %q", want)
		}
	}
	checkMetrics(t, "panel", exprs)
}
