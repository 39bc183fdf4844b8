package deploy_test

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/seqd/seqd/admin"
)

// entrypoint returns the exec-form ENTRYPOINT of a Dockerfile.
func entrypoint(t *testing.T, dockerfile string) []string {
	t.Helper()
	argv := instruction(t, dockerfile, "ENTRYPOINT")
	if argv == nil {
		t.Fatalf("%s: no ENTRYPOINT", dockerfile)
	}
	return argv
}

// instruction returns the exec form of a Dockerfile's ENTRYPOINT or CMD,
// nil when it has none.
func instruction(t *testing.T, dockerfile, name string) []string {
	t.Helper()
	b, err := os.ReadFile(dockerfile)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, name+" "); ok {
			var argv []string
			if err := json.Unmarshal([]byte(rest), &argv); err != nil {
				t.Fatalf("%s: %s is not exec form: %v", dockerfile, name, err)
			}
			return argv
		}
	}
	return nil
}

func flagValue(argv []string, name string) string {
	if i := slices.Index(argv, "-"+name); i >= 0 && i+1 < len(argv) {
		return argv[i+1]
	}
	return ""
}

// TestImagesShipWithAuth (issue 26): the images bound the admin plane to
// 0.0.0.0 with no token. Their entrypoints now name a token file and
// never the insecure flag, and seqd started as the entrypoint says,
// without the token file mounted, refuses to start naming it.
func TestImagesShipWithAuth(t *testing.T) {
	for _, df := range []string{"../Dockerfile", "../Dockerfile.ibverbs"} {
		argv := entrypoint(t, df)
		if slices.Contains(argv, "-admin-insecure-no-auth") {
			t.Errorf("%s: ENTRYPOINT has -admin-insecure-no-auth", df)
		}
		if a := flagValue(argv, "admin"); !admin.IsLoopbackAddr(a) && flagValue(argv, "admin-token-file") == "" && flagValue(argv, "admin-allow") == "" {
			t.Errorf("%s: ENTRYPOINT serves -admin %s with no -admin-token-file", df, a)
		}
	}
	if testing.Short() {
		return
	}
	argv := entrypoint(t, "../Dockerfile")
	tokens := flagValue(argv, "admin-token-file")
	if _, err := os.Stat(tokens); err == nil {
		t.Skipf("%s exists on this machine", tokens)
	}
	args := append(slices.Clone(argv[1:]), "-data", t.TempDir(), "-init", "-device", "127.0.0.1:0", "-admin", "0.0.0.0:0", "-metrics", "127.0.0.1:0")
	cmd := exec.Command(filepath.Join(binaries(t), "seqd"), args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		out.WriteString(sc.Text() + "\n")
		if strings.Contains(sc.Text(), "seqd serving") {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("seqd %v started without %s:\n%s", args, tokens, out.String())
		}
	}
	if err := cmd.Wait(); err == nil || !strings.Contains(out.String(), tokens) {
		t.Fatalf("seqd %v without %s: %v, want a refusal naming it:\n%s", args, tokens, err, out.String())
	}
}
