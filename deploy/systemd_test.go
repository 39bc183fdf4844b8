package deploy_test

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// unitValues returns every value of key in a unit file's text (keys such
// as LoadCredential= and Environment= may repeat).
func unitValues(text, key string) []string {
	var vs []string
	for _, line := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), key+"="); ok {
			vs = append(vs, v)
		}
	}
	return vs
}

// credentials returns the unit's LoadCredential= entries, ID to path.
func credentials(t *testing.T, what, text string) map[string]string {
	t.Helper()
	creds := map[string]string{}
	for _, v := range unitValues(text, "LoadCredential") {
		id, path, ok := strings.Cut(v, ":")
		if !ok || !filepath.IsAbs(path) {
			t.Errorf("%s: LoadCredential=%s: want ID:/absolute/path", what, v)
			continue
		}
		creds[id] = path
	}
	return creds
}

// credRef matches a reference to a file of the credentials directory.
var credRef = regexp.MustCompile(`(?:%d|\$\{CREDENTIALS_DIRECTORY\})/([A-Za-z0-9_.-]+)`)

// checkCredRefs fails for each reference to a credential the unit does
// not load, and for each secret read from its source path directly.
func checkCredRefs(t *testing.T, what, s string, creds map[string]string) {
	t.Helper()
	for _, m := range credRef.FindAllStringSubmatch(s, -1) {
		if _, ok := creds[m[1]]; !ok {
			t.Errorf("%s reads credential %q, which no LoadCredential= loads", what, m[1])
		}
	}
	for id, path := range creds {
		if strings.Contains(s, path) {
			t.Errorf("%s reads %s directly: the dynamic user cannot read it (use %%d/%s)", what, path, id)
		}
	}
}

// TestUnitReadsSecretsThroughCredentials (issue 29): the unit ran as a
// DynamicUser=yes while the guide put the token and the TLS key in
// root-owned 0600 files, which that user cannot read. The unit loads the
// token file with LoadCredential= and seqd reads the copy in the
// credentials directory; the TLS drop-in does the same for the key. seqd,
// started with the unit's ExecStart and that directory, refuses to start
// without the credential and serves with it, authorising with its token.
func TestUnitReadsSecretsThroughCredentials(t *testing.T) {
	b, err := os.ReadFile("systemd/seqd.service")
	if err != nil {
		t.Fatal(err)
	}
	unit := string(b)
	u := unitSettings(t)
	if u["DynamicUser"] != "yes" {
		t.Fatalf("DynamicUser=%q: this test is about the dynamic user's secrets", u["DynamicUser"])
	}
	creds := credentials(t, "seqd.service", unit)
	if _, ok := creds["admin-tokens"]; !ok {
		t.Fatalf("seqd.service has no LoadCredential=admin-tokens:PATH (has %v)", creds)
	}
	exec0 := u["ExecStart"]
	argv := strings.Fields(exec0)
	if i := slices.Index(argv, "-admin-token-file"); i < 0 || i+1 == len(argv) || !credRef.MatchString(argv[i+1]) {
		t.Errorf("ExecStart %q: want -admin-token-file %%d/admin-tokens", exec0)
	}
	checkCredRefs(t, "seqd.service ExecStart", exec0, creds)

	// The TLS drop-in: its variables are seqd flags and read credentials
	// it loads.
	tb, err := os.ReadFile("systemd/seqd-tls.conf")
	if err != nil {
		t.Fatal(err)
	}
	tlsCreds := credentials(t, "seqd-tls.conf", string(tb))
	flags := seqdFlags(t)
	var env []string
	for _, v := range unitValues(string(tb), "Environment") {
		env = append(env, strings.Fields(v)...)
	}
	set := map[string]bool{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		f := envFlag(k)
		if !slices.Contains(flags, f) {
			t.Errorf("seqd-tls.conf: %s is no seqd flag's variable", k)
		}
		set[f] = true
		checkCredRefs(t, "seqd-tls.conf "+k, v, tlsCreds)
	}
	for _, f := range []string{"admin-tls-cert", "admin-tls-key"} {
		if !set[f] {
			t.Errorf("seqd-tls.conf does not set -%s", f)
		}
	}
	if sa, err := exec.LookPath("systemd-analyze"); err == nil {
		// The drop-in applied: its [Service] section after the unit's.
		withTLS := strings.ReplaceAll(unit, "/usr/local/bin/seqd ", filepath.Join(binaries(t), "seqd")+" ") + "\n" + string(tb)
		path := filepath.Join(t.TempDir(), "seqd.service")
		if err := os.WriteFile(path, []byte(withTLS), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(sa, "verify", path).CombinedOutput()
		if err != nil || strings.Contains(string(out), "seqd.service") {
			t.Errorf("systemd-analyze verify seqd.service + seqd-tls.conf: %v\n%s", err, out)
		}
	}

	if testing.Short() {
		return
	}
	// Run ExecStart as systemd would: %d is the credentials directory,
	// holding a 0400 copy of each credential; $SEQD_FLAGS is -init (the
	// first start). Only what would collide on a shared machine is
	// overridden.
	credDir := t.TempDir()
	token := "systemd-unit-test-token-0123456789"
	args := []string{}
	for _, a := range argv[1:] {
		a = strings.ReplaceAll(strings.ReplaceAll(a, "${CREDENTIALS_DIRECTORY}", credDir), "%d", credDir)
		switch a {
		case "$SEQD_FLAGS", "${SEQD_FLAGS}":
			a = "-init"
		case "/etc/seqd/seqd.conf":
			a = "seqd.conf"
		}
		args = append(args, a)
	}
	args = append(args, "-data", t.TempDir(), "-admin", "127.0.0.1:0", "-metrics", "127.0.0.1:0", "-device", "127.0.0.1:0")
	if runtime.NumCPU() < 2 {
		args = append(args, "-cores", "none")
	}
	seqd := filepath.Join(binaries(t), "seqd")
	// No credential: seqd refuses to start, naming the file.
	out, err := exec.Command(seqd, args...).CombinedOutput()
	if err == nil || !strings.Contains(string(out), filepath.Join(credDir, "admin-tokens")) {
		t.Fatalf("seqd %v without its credential: %v, want a refusal naming it:\n%s", args, err, out)
	}
	if err := os.WriteFile(filepath.Join(credDir, "admin-tokens"), []byte(token+"\n"), 0o400); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(seqd, args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	}()
	var log strings.Builder
	admin := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sent := false
		for sc.Scan() {
			log.WriteString(sc.Text() + "\n")
			if m := regexp.MustCompile(`seqd serving.* admin=(\S+)`).FindStringSubmatch(sc.Text()); m != nil && !sent {
				admin <- m[1]
				sent = true
			}
		}
		if !sent {
			close(admin)
		}
	}()
	var addr string
	select {
	case a, ok := <-admin:
		if !ok {
			cmd.Wait()
			t.Fatalf("seqd %v exited without serving:\n%s", args, log.String())
		}
		addr = a
	case <-time.After(30 * time.Second):
		t.Fatalf("seqd %v: not serving after 30s", args)
	}
	seqctl := filepath.Join(binaries(t), "seqctl")
	if out, err := exec.Command(seqctl, "-admin", addr, "set-mode", "spec-s0").CombinedOutput(); err == nil {
		t.Errorf("set-mode without a token succeeded: the credential is not in force\n%s", out)
	}
	tokFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(seqctl, "-admin", addr, "-token-file", tokFile, "set-mode", "spec-s0").CombinedOutput(); err != nil {
		t.Errorf("set-mode with the credential's token: %v\n%s", err, out)
	}
}
