package deploy_test

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/seqd/seqd/client"
	"github.com/seqd/seqd/ha"
	"github.com/seqd/seqd/ha/hatest"
)

// podArgv is what the container runs, by Kubernetes' rules: command
// replaces the image's ENTRYPOINT, args its CMD, and a command without
// args drops the CMD too.
func podArgv(t *testing.T, c corev1.Container) []string {
	t.Helper()
	if len(c.Command) > 0 {
		return append(slices.Clone(c.Command), c.Args...)
	}
	argv := entrypoint(t, "../Dockerfile")
	if len(c.Args) > 0 {
		return append(argv, c.Args...)
	}
	return append(argv, instruction(t, "../Dockerfile", "CMD")...)
}

// TestKubernetesEnvIsInForce: seqd's command-line flags win over its
// SEQD_* variables, so a flag the image's ENTRYPOINT or CMD passes makes
// the manifest's variable for it dead. The image passes -admin-token-file
// /run/secrets/seqd-admin-tokens and -device 127.0.0.1:4791: without its
// own command the pods would look for a token file where the Secret is
// not mounted, and serve the data plane on loopback while advertising the
// pod's address.
func TestKubernetesEnvIsInForce(t *testing.T) {
	_, sets := k8sObjects(t)
	for _, ss := range sets {
		c := ss.Spec.Template.Spec.Containers[0]
		argv := podArgv(t, c)
		if len(argv) == 0 || filepath.Base(argv[0]) != "seqd" {
			t.Fatalf("StatefulSet %s runs %v, not seqd", ss.Name, argv)
		}
		for _, e := range c.Env {
			f := envFlag(e.Name)
			if f == "" {
				continue
			}
			for _, a := range argv[1:] {
				name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
				if strings.HasPrefix(a, "-") && name == f {
					t.Errorf("StatefulSet %s: %s=%s is dead: the container runs %v, whose -%s wins", ss.Name, e.Name, e.Value, argv, f)
				}
			}
		}
	}
}

// haEnv is the environment the manifest gives seqd, $(VAR) expanded as
// Kubernetes does, with POD_IP 127.0.0.1 and over.
func haEnv(c corev1.Container, over map[string]string) []string {
	vals := map[string]string{}
	var env []string
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "SEQD_") {
			env = append(env, e)
		}
	}
	for _, e := range c.Env {
		v := e.Value
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "status.podIP" {
			v = "127.0.0.1"
		}
		v = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`).ReplaceAllStringFunc(v, func(m string) string {
			return vals[m[2:len(m)-1]]
		})
		if o, ok := over[e.Name]; ok {
			v = o
		}
		vals[e.Name] = v
		if v != "" {
			env = append(env, e.Name+"="+v)
		}
	}
	return env
}

// runUntil runs argv with env in dir until a log line matches want
// (true) or it exits (false), and returns its log so far.
func runUntil(t *testing.T, argv, env []string, dir string, want *regexp.Regexp) (*exec.Cmd, bool, string) {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env, cmd.Dir = env, dir
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var (
		mu  sync.Mutex // the scanner goes on writing log after a hit
		log strings.Builder
	)
	logSoFar := func() string {
		mu.Lock()
		defer mu.Unlock()
		return log.String()
	}
	hit := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sent := false
		for sc.Scan() {
			mu.Lock()
			log.WriteString(sc.Text() + "\n")
			mu.Unlock()
			if !sent && want.MatchString(sc.Text()) {
				hit <- true
				sent = true
			}
		}
		if !sent {
			hit <- false
		}
	}()
	select {
	case ok := <-hit:
		if !ok {
			cmd.Wait()
		}
		return cmd, ok, logSoFar()
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("%v: no %q after 60s:\n%s", argv, want, logSoFar())
		return nil, false, ""
	}
}

// TestKubernetesHAStartsANewGroup runs what a pod of the manifest runs
// (its command and environment; the listeners on free loopback ports)
// against a real etcd: the first pod of a new group leads (SEQD_INIT); a
// pod restarted without SEQD_INIT leads on the mark kept in etcd; one
// without SEQD_INIT under a mistyped prefix stops; and none writes to its
// working directory (the image's /var/lib/seqd) but its witness in -data.
func TestKubernetesHAStartsANewGroup(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts etcd and seqd")
	}
	_, sets := k8sObjects(t)
	c := sets[0].Spec.Template.Spec.Containers[0]
	etcd := hatest.Start(t, 1)
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte("kubernetes-ha-test-token-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := haEnv(c, map[string]string{
		"SEQD_ETCD_ENDPOINTS":   strings.Join(etcd.Endpoints(), ","),
		"SEQD_ADMIN":            "127.0.0.1:0",
		"SEQD_METRICS":          "127.0.0.1:0",
		"SEQD_DEVICE":           "0.0.0.0:0",
		"SEQD_ADMIN_TOKEN_FILE": tokens,
	})
	argv := podArgv(t, c)
	argv[0] = filepath.Join(binaries(t), "seqd")
	work := t.TempDir()
	serving := regexp.MustCompile(`"msg":"seqd serving \(HA\)".*"admin":"([^"]+)"`)
	// The first start of a new group: SEQD_INIT lets it create the mark.
	// The second, without SEQD_INIT (the comment's advice once the group
	// has served), serves on the mark the first left in etcd, above the
	// first's values.
	var last uint64
	for i, e := range [][]string{env, without(env, "SEQD_INIT")} {
		cmd, ok, log := runUntil(t, argv, e, work, serving)
		if !ok {
			t.Fatalf("start %d: seqd %v did not serve:\n%s", i+1, argv, log)
		}
		admin := serving.FindStringSubmatch(log)[1]
		ts, err := timestamp(admin)
		cmd.Process.Signal(os.Interrupt)
		werr := cmd.Wait()
		if err != nil {
			t.Fatalf("start %d: no timestamp from the leader: %v", i+1, err)
		}
		if uint64(ts) <= last {
			t.Errorf("start %d: timestamp %d, not above the first start's %d", i+1, ts, last)
		}
		last = uint64(ts)
		if werr != nil {
			t.Errorf("start %d: seqd exited with %v", i+1, werr)
		}
	}
	// Without SEQD_INIT a mistyped prefix (no mark) stops the pod.
	e := append(without(env, "SEQD_INIT", "SEQD_ETCD_PREFIX"), "SEQD_ETCD_PREFIX=/seqd/prdo")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env, cmd.Dir = e, work
	out, err := cmd.CombinedOutput()
	if err == nil || ctx.Err() != nil || !strings.Contains(string(out), "-init") {
		t.Errorf("seqd under a prefix with no mark, without SEQD_INIT: %v (want an exit naming -init):\n%s", err, out)
	}
	// The one thing an HA instance keeps on disk is its witness (the
	// highest group mark it has seen, ha.WitnessDirName) in -data.
	if ents, _ := os.ReadDir(work); len(ents) != 1 || ents[0].Name() != "seqd-data" {
		t.Errorf("an HA instance wrote to its working directory other than its witness in seqd-data: %v", ents)
	}
	if ents, _ := os.ReadDir(filepath.Join(work, "seqd-data")); len(ents) != 1 || ents[0].Name() != ha.WitnessDirName {
		t.Errorf("an HA instance wrote to -data other than its witness: %v", ents)
	}
}

// without returns env less the variables named.
func without(env []string, names ...string) []string {
	return slices.DeleteFunc(slices.Clone(env), func(kv string) bool {
		k, _, _ := strings.Cut(kv, "=")
		return slices.Contains(names, k)
	})
}

// timestamp gets one timestamp from the HA group at admin, dialing again
// while no leader serves yet (a new instance answers Unavailable until
// its term has loaded the mark), for at most 30s.
func timestamp(admin string) (client.Timestamp, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		cl, err := client.Dial(ctx, admin, client.WithInsecure())
		if err == nil {
			ts, err := cl.GetTimestamp(ctx)
			cl.Close()
			return ts, err
		}
		if !errors.Is(err, client.ErrUnavailable) || ctx.Err() != nil {
			return 0, err
		}
		select {
		case <-ctx.Done():
			return 0, err
		case <-time.After(100 * time.Millisecond):
		}
	}
}
