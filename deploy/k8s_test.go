package deploy_test

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// k8sObjects decodes every document of deploy/k8s/*.yaml STRICTLY (an
// unknown or misspelt field fails) into its k8s.io/api type.
func k8sObjects(t *testing.T) (svcs []corev1.Service, sets []appsv1.StatefulSet) {
	t.Helper()
	files, err := filepath.Glob("k8s/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in deploy/k8s: %v", err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range bytes.Split(b, []byte("\n---\n")) {
			var meta struct {
				Kind string `json:"kind"`
			}
			if err := yaml.Unmarshal(doc, &meta); err != nil {
				t.Fatalf("%s document %d: %v", f, i, err)
			}
			switch meta.Kind {
			case "Service":
				var s corev1.Service
				if err := yaml.UnmarshalStrict(doc, &s); err != nil {
					t.Fatalf("%s document %d (Service): %v", f, i, err)
				}
				svcs = append(svcs, s)
			case "StatefulSet":
				var s appsv1.StatefulSet
				if err := yaml.UnmarshalStrict(doc, &s); err != nil {
					t.Fatalf("%s document %d (StatefulSet): %v", f, i, err)
				}
				sets = append(sets, s)
			default:
				t.Fatalf("%s document %d: unexpected kind %q", f, i, meta.Kind)
			}
		}
	}
	return svcs, sets
}

// envFlag is the seqd flag an SEQD_* variable sets (SEQD_ETCD_ENDPOINTS:
// etcd-endpoints), "" for another variable.
func envFlag(name string) string {
	rest, ok := strings.CutPrefix(name, "SEQD_")
	if !ok {
		return ""
	}
	return strings.ReplaceAll(strings.ToLower(rest), "_", "-")
}

func TestKubernetesManifests(t *testing.T) {
	svcs, sets := k8sObjects(t)
	if len(svcs) != 1 || len(sets) != 1 {
		t.Fatalf("want one Service and one StatefulSet, got %d and %d", len(svcs), len(sets))
	}
	svc, ss := svcs[0], sets[0]
	if svc.Spec.ClusterIP != corev1.ClusterIPNone {
		t.Errorf("Service %s is not headless (clusterIP %q)", svc.Name, svc.Spec.ClusterIP)
	}
	if ss.Spec.ServiceName != svc.Name {
		t.Errorf("StatefulSet serviceName %q, want the headless Service %q", ss.Spec.ServiceName, svc.Name)
	}
	if ss.Spec.Replicas == nil || *ss.Spec.Replicas != 3 {
		t.Errorf("replicas %v, want 3 (an HA group of three)", ss.Spec.Replicas)
	}
	labels := ss.Spec.Template.Labels
	for k, v := range ss.Spec.Selector.MatchLabels {
		if labels[k] != v {
			t.Errorf("StatefulSet selector %s=%s does not match the pod template", k, v)
		}
	}
	for k, v := range svc.Spec.Selector {
		if labels[k] != v {
			t.Errorf("Service selector %s=%s does not match the pod template", k, v)
		}
	}
	if len(ss.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("want one container, got %d", len(ss.Spec.Template.Spec.Containers))
	}
	c := ss.Spec.Template.Spec.Containers[0]

	// Every setting names a real seqd flag: SEQD_* variables and arguments.
	real := seqdFlags(t)
	set := map[string]string{}
	for _, e := range c.Env {
		if f := envFlag(e.Name); f != "" {
			if !slices.Contains(real, f) {
				t.Errorf("env %s: seqd has no flag -%s", e.Name, f)
			}
			set[f] = e.Value
		}
	}
	for _, a := range append(slices.Clone(c.Command), c.Args...) {
		if name, ok := strings.CutPrefix(a, "-"); ok {
			name, _, _ = strings.Cut(strings.TrimPrefix(name, "-"), "=")
			if !slices.Contains(real, name) {
				t.Errorf("argument %s: seqd has no flag -%s", a, name)
			}
		}
	}
	for _, f := range []string{"etcd-endpoints", "admin", "device", "metrics", "advertise", "provider-opts"} {
		if set[f] == "" {
			t.Errorf("no SEQD_ variable sets -%s", f)
		}
	}
	// An HA group (issue 27) refuses a missing mark unless -init: without
	// it a new group's pods never start. -init never overwrites a mark
	// (ha/doc.go, invariant 5), so the manifest keeps it.
	if set["etcd-endpoints"] != "" && set["init"] != "true" {
		t.Errorf("SEQD_INIT=%q: a new HA group's pods stop on the missing mark without -init", set["init"])
	}

	// Authorisation is on (issue 26): the admin plane listens off
	// loopback, so mutating calls need a token of a file mounted from a
	// Secret, that seqd's user can read and nobody else; never the
	// insecure flag.
	if v := set["admin-insecure-no-auth"]; v != "" && v != "false" {
		t.Errorf("SEQD_ADMIN_INSECURE_NO_AUTH=%s: the manifest must ship with admin authorisation on", v)
	}
	if set["pprof"] != "" && set["pprof"] != "false" && set["admin-token-file"] == "" {
		t.Error("-pprof off loopback without -admin-token-file")
	}
	tokens := set["admin-token-file"]
	if tokens == "" && set["admin-allow"] == "" {
		t.Errorf("-admin %s is off loopback and no SEQD_ADMIN_TOKEN_FILE or SEQD_ADMIN_ALLOW sets a credential", set["admin"])
	} else if tokens != "" {
		checkTokenSecret(t, ss, c, tokens)
	}

	// Ports: the flags' listeners, the container's ports, the probes'
	// and the Service's agree.
	ports := map[string]corev1.ContainerPort{}
	for _, p := range c.Ports {
		ports[p.Name] = p
	}
	for _, x := range []struct{ flag, port, proto string }{
		{"admin", "admin", "TCP"}, {"device", "data", "UDP"}, {"metrics", "metrics", "TCP"},
	} {
		_, port, err := net.SplitHostPort(set[x.flag])
		if err != nil {
			t.Errorf("-%s %q: %v", x.flag, set[x.flag], err)
			continue
		}
		p, ok := ports[x.port]
		if !ok || port != itoa(p.ContainerPort) || string(p.Protocol) != x.proto {
			t.Errorf("-%s listens on %s, container port %q is %+v (want %s)", x.flag, port, x.port, p, x.proto)
		}
	}
	if !strings.HasPrefix(set["provider-opts"], "advertise=$(POD_IP)") || !strings.HasSuffix(set["advertise"], ":"+itoa(ports["admin"].ContainerPort)) {
		t.Errorf("the data plane and admin addresses clients are told must be the pod's: provider-opts %q advertise %q",
			set["provider-opts"], set["advertise"])
	}
	for name, pr := range map[string]*corev1.Probe{"startup": c.StartupProbe, "readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
		if pr == nil || pr.GRPC == nil {
			t.Errorf("%s probe: want a gRPC health probe, got %+v", name, pr)
			continue
		}
		if pr.GRPC.Port != ports["admin"].ContainerPort {
			t.Errorf("%s probe on port %d, the admin listener is %d", name, pr.GRPC.Port, ports["admin"].ContainerPort)
		}
	}
	for _, sp := range svc.Spec.Ports {
		p, ok := ports[sp.TargetPort.String()]
		if !ok || p.ContainerPort != sp.Port || p.Protocol != sp.Protocol {
			t.Errorf("Service port %s targets %q: no such container port (%+v)", sp.Name, sp.TargetPort.String(), p)
		}
	}

	// Issue 29: an HA instance keeps its mark and mode in etcd, and in
	// -data only its witness, which this hybrid-format variant keeps in
	// the container (see the manifest's comment), so it claims no volume:
	// its only volumes are Secrets (the admin tokens).
	if set["etcd-endpoints"] != "" {
		if n := len(ss.Spec.VolumeClaimTemplates); n != 0 {
			t.Errorf("the HA StatefulSet claims %d volumes per pod, which this hybrid-format HA variant does without", n)
		}
		for _, v := range ss.Spec.Template.Spec.Volumes {
			if v.Secret == nil {
				t.Errorf("the HA pods mount volume %q (%+v), which is not a Secret", v.Name, v.VolumeSource)
			}
		}
		if set["data"] != "" {
			t.Errorf("SEQD_DATA=%s: the HA variant keeps its witness in the image's default -data", set["data"])
		}
	}
}

// checkTokenSecret checks that the token file is in a Secret volume
// mounted read-only into the container, in a mode ReadTokens accepts
// (owner-only, or group-readable at most: root-owned with fsGroup), and
// that the pod runs as a non-root user in the fsGroup that reads it.
func checkTokenSecret(t *testing.T, ss appsv1.StatefulSet, c corev1.Container, tokens string) {
	t.Helper()
	var mount *corev1.VolumeMount
	for i, m := range c.VolumeMounts {
		if m.MountPath == filepath.Dir(tokens) {
			mount = &c.VolumeMounts[i]
		}
	}
	if mount == nil || !mount.ReadOnly {
		t.Errorf("-admin-token-file %s: its directory is not a read-only volume mount: %+v", tokens, c.VolumeMounts)
		return
	}
	var vol *corev1.Volume
	for i, v := range ss.Spec.Template.Spec.Volumes {
		if v.Name == mount.Name {
			vol = &ss.Spec.Template.Spec.Volumes[i]
		}
	}
	if vol == nil || vol.Secret == nil || vol.Secret.SecretName == "" {
		t.Errorf("-admin-token-file %s: volume %q is not a Secret: %+v", tokens, mount.Name, vol)
		return
	}
	if vol.Secret.Optional != nil && *vol.Secret.Optional {
		t.Errorf("token Secret %s is optional: seqd would start without it", vol.Secret.SecretName)
	}
	if m := vol.Secret.DefaultMode; m == nil || *m&0o037 != 0 {
		t.Errorf("token Secret defaultMode %v: want 0400 or 0440 (seqd refuses a token file others can read)", m)
	}
	sc := ss.Spec.Template.Spec.SecurityContext
	if sc == nil || sc.FSGroup == nil || sc.RunAsUser == nil || *sc.RunAsUser == 0 {
		t.Errorf("pod securityContext %+v: want a non-root runAsUser and an fsGroup that reads the token Secret", sc)
	}
}

func itoa(p int32) string { return strconv.Itoa(int(p)) }
