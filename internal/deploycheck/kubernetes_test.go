package deploycheck

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/dpstage/stage/config"
)

// drain is the stage's soft-stop drain (node.New's default Drain): a pod's
// terminationGracePeriodSeconds must exceed it.
const drain = 30 * time.Second

// probePaths are the paths both listeners serve without a token.
var probePaths = []string{"/healthz", "/readyz"}

// manifest is one file's decoded objects.
type manifest struct {
	configMaps  map[string]*corev1.ConfigMap
	deployments []*appsv1.Deployment
	services    []*corev1.Service
	pdbs        []*policyv1.PodDisruptionBudget
	netpols     []*networkingv1.NetworkPolicy
}

// decodeStrict decodes one YAML document into v through JSON (the API
// types' own encoding), refusing unknown fields.
func decodeStrict(doc map[string]any, v any) error {
	raw, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// readManifest decodes every document of deploy/kubernetes/name into its
// Kubernetes API type; an unknown kind or field fails.
func readManifest(t *testing.T, name string) manifest {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(root, "deploy", "kubernetes", name))
	if err != nil {
		t.Fatal(err)
	}
	m := manifest{configMaps: map[string]*corev1.ConfigMap{}}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	for i := 0; ; i++ {
		var doc map[string]any
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("%s: document %d: %v", name, i, err)
		}
		if doc == nil {
			continue
		}
		kind := doc["apiVersion"].(string) + " " + doc["kind"].(string)
		var obj any
		switch kind {
		case "v1 ConfigMap":
			obj = &corev1.ConfigMap{}
		case "apps/v1 Deployment":
			obj = &appsv1.Deployment{}
		case "v1 Service":
			obj = &corev1.Service{}
		case "policy/v1 PodDisruptionBudget":
			obj = &policyv1.PodDisruptionBudget{}
		case "networking.k8s.io/v1 NetworkPolicy":
			obj = &networkingv1.NetworkPolicy{}
		default:
			t.Fatalf("%s: document %d: %s is not a kind this test decodes: add it", name, i, kind)
		}
		if err := decodeStrict(doc, obj); err != nil {
			t.Fatalf("%s: document %d (%s): %v", name, i, kind, err)
		}
		switch o := obj.(type) {
		case *corev1.ConfigMap:
			m.configMaps[o.Name] = o
		case *appsv1.Deployment:
			m.deployments = append(m.deployments, o)
		case *corev1.Service:
			m.services = append(m.services, o)
		case *policyv1.PodDisruptionBudget:
			m.pdbs = append(m.pdbs, o)
		case *networkingv1.NetworkPolicy:
			m.netpols = append(m.netpols, o)
		}
	}
	return m
}

// portOf returns the port of a host:port listener address.
func portOf(t *testing.T, what, addr string) int32 {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("%s %q: %v", what, addr, err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatalf("%s %q: %v", what, addr, err)
	}
	return int32(n)
}

// resolve returns the container port an int-or-name port refers to.
func resolve(c corev1.Container, p intstr.IntOrString) (int32, bool) {
	for _, cp := range c.Ports {
		if (p.Type == intstr.String && cp.Name == p.StrVal) || (p.Type == intstr.Int && cp.ContainerPort == p.IntVal) {
			return cp.ContainerPort, true
		}
	}
	return 0, false
}

var envRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)`)

// checkDeployment checks one Deployment against the config it mounts and
// returns that config.
func checkDeployment(t *testing.T, m manifest, d *appsv1.Deployment) *config.Config {
	t.Helper()
	spec := d.Spec.Template.Spec
	if len(spec.Containers) != 1 {
		t.Fatalf("%s: %d containers, want the stage's one", d.Name, len(spec.Containers))
	}
	c := spec.Containers[0]
	args := c.Args
	i := slices.Index(args, "--config")
	if len(args) == 0 || args[0] != "run" || i < 0 || i+1 >= len(args) {
		t.Fatalf("%s: args %v, want run --config FILE", d.Name, args)
	}
	cfgPath := args[i+1]

	// The config file comes from a ConfigMap volume mounted at its folder.
	volumes := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		volumes[v.Name] = v
	}
	var cm *corev1.ConfigMap
	var stateMounted bool
	var cfgData string
	for _, vm := range c.VolumeMounts {
		v, ok := volumes[vm.Name]
		if !ok {
			t.Errorf("%s: mount %s of no volume", d.Name, vm.Name)
			continue
		}
		if v.ConfigMap != nil && path.Dir(cfgPath) == path.Clean(vm.MountPath) {
			cm = m.configMaps[v.ConfigMap.Name]
			if cm == nil {
				t.Fatalf("%s: ConfigMap %s is not in the manifest", d.Name, v.ConfigMap.Name)
			}
			cfgData = cm.Data[path.Base(cfgPath)]
		}
		if v.EmptyDir != nil {
			stateMounted = stateMounted || vm.MountPath != ""
		}
	}
	if cm == nil || cfgData == "" {
		t.Fatalf("%s: no ConfigMap key mounted at %s", d.Name, cfgPath)
	}

	// Every ${VAR} of the config is set from a Secret.
	env := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
			continue
		}
		env[e.Name] = "test-value-of-" + e.Name // distinct: the two tokens must differ
	}
	for _, ref := range envRef.FindAllStringSubmatch(cfgData, -1) {
		if _, ok := env[ref[1]]; !ok {
			t.Errorf("%s: the config reads ${%s}, which no secretKeyRef env sets", d.Name, ref[1])
		}
	}
	cfg, err := config.Parse([]byte(cfgData), func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatalf("%s: the mounted config is invalid: %v", d.Name, err)
	}
	if cfg.HTTP.Address == "" || cfg.HTTP.OperatorAddress == "" {
		t.Fatalf("%s: the config must turn both listeners on", d.Name)
	}
	public, operator := portOf(t, "http.address", cfg.HTTP.Address), portOf(t, "http.operator_address", cfg.HTTP.OperatorAddress)
	if p, ok := resolve(c, intstr.FromString("public")); !ok || p != public {
		t.Errorf("%s: container port \"public\" is %d, the config's http.address serves %d", d.Name, p, public)
	}
	if p, ok := resolve(c, intstr.FromString("operator")); !ok || p != operator {
		t.Errorf("%s: container port \"operator\" is %d, the config's http.operator_address serves %d", d.Name, p, operator)
	}
	if cfg.State.Ledger != config.LedgerKafka {
		t.Errorf("%s: state.ledger %q: pods share no disk, the release log must be on Kafka", d.Name, cfg.State.Ledger)
	}
	if !stateMounted {
		t.Errorf("%s: no writable volume (emptyDir) for state.dir %s", d.Name, cfg.State.Dir)
	}
	var stateVol bool
	for _, vm := range c.VolumeMounts {
		if v := volumes[vm.Name]; v.EmptyDir != nil && path.Clean(vm.MountPath) == path.Clean(cfg.State.Dir) {
			stateVol = true
		}
	}
	if !stateVol {
		t.Errorf("%s: state.dir %s is not an emptyDir mount (the root filesystem is read-only)", d.Name, cfg.State.Dir)
	}

	// Probes: HTTP GETs of /healthz or /readyz on a listener's port.
	for what, p := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
		if p == nil || p.HTTPGet == nil {
			t.Errorf("%s: no HTTP %s probe", d.Name, what)
			continue
		}
		if !slices.Contains(probePaths, p.HTTPGet.Path) {
			t.Errorf("%s: %s probe path %q: the stage serves %v without a token", d.Name, what, p.HTTPGet.Path, probePaths)
		}
		if port, ok := resolve(c, p.HTTPGet.Port); !ok || (port != public && port != operator) {
			t.Errorf("%s: %s probe port %s is neither listener (%d, %d)", d.Name, what, p.HTTPGet.Port.String(), public, operator)
		}
	}
	if p := c.ReadinessProbe; p != nil && p.HTTPGet != nil && p.HTTPGet.Path != "/readyz" {
		t.Errorf("%s: the readiness probe must ask /readyz", d.Name)
	}

	// Prometheus scrapes the operator listener's /metrics.
	ann := d.Spec.Template.Annotations
	if ann["prometheus.io/scrape"] != "true" || ann["prometheus.io/port"] != strconv.Itoa(int(operator)) || ann["prometheus.io/path"] != "/metrics" {
		t.Errorf("%s: scrape annotations %v, want the operator listener's port %d and /metrics", d.Name, ann, operator)
	}
	if g := spec.TerminationGracePeriodSeconds; g == nil || time.Duration(*g)*time.Second <= drain {
		t.Errorf("%s: terminationGracePeriodSeconds must exceed the stage's %v drain", d.Name, drain)
	}
	if sc := c.SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("%s: readOnlyRootFilesystem not set", d.Name)
	}

	// The public listener is the Service's target; the operator one is not
	// exposed by any Service.
	var served bool
	for _, s := range m.services {
		if !selects(s.Spec.Selector, d.Spec.Template.Labels) {
			continue
		}
		for _, sp := range s.Spec.Ports {
			port, ok := resolve(c, sp.TargetPort)
			if !ok {
				t.Errorf("Service %s: targetPort %s is no port of %s", s.Name, sp.TargetPort.String(), d.Name)
			}
			if port == operator {
				t.Errorf("Service %s exposes the operator listener (private counts)", s.Name)
			}
			served = served || port == public
		}
	}
	if !served {
		t.Errorf("%s: no Service targets its public listener", d.Name)
	}
	// A NetworkPolicy lets only some peers (Prometheus) reach the operator port.
	var guarded bool
	for _, np := range m.netpols {
		if !selects(np.Spec.PodSelector.MatchLabels, d.Spec.Template.Labels) {
			continue
		}
		for _, rule := range np.Spec.Ingress {
			for _, p := range rule.Ports {
				if p.Port == nil {
					continue
				}
				if port, ok := resolve(c, *p.Port); ok && port == operator {
					guarded = len(rule.From) > 0
				}
			}
		}
	}
	if !guarded {
		t.Errorf("%s: no NetworkPolicy limits who reaches the operator listener", d.Name)
	}
	return cfg
}

// selects: every label of sel is among labels.
func selects(sel, labels map[string]string) bool {
	if len(sel) == 0 {
		return false
	}
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// TestKubernetesSingle: deploy/kubernetes/single.yaml — an active and a
// standby instance (two Deployments of one replica, Recreate: a standby is
// never ready, so a rolling update would stall) sharing the release log on
// Kafka and nothing else, one config.
func TestKubernetesSingle(t *testing.T) {
	m := readManifest(t, "single.yaml")
	if len(m.deployments) != 2 {
		t.Fatalf("%d Deployments, want 2 (active and standby)", len(m.deployments))
	}
	var cfgs []*config.Config
	for _, d := range m.deployments {
		cfg := checkDeployment(t, m, d)
		cfgs = append(cfgs, cfg)
		if cfg.Kafka.Distributed.Enabled {
			t.Errorf("%s: kafka.distributed is on in the single-process manifest", d.Name)
		}
		if d.Spec.Replicas == nil || *d.Spec.Replicas != 1 {
			t.Errorf("%s: replicas must be 1 (the other Deployment is the standby)", d.Name)
		}
		if d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
			t.Errorf("%s: strategy %q: a rolling update waits for a standby to turn ready, which it never does; use Recreate", d.Name, d.Spec.Strategy.Type)
		}
	}
	if cfgs[0].State.LedgerTopic != cfgs[1].State.LedgerTopic || cfgs[0].Kafka.GroupID != cfgs[1].Kafka.GroupID {
		t.Error("the two instances must share the group and the release log topic")
	}
}

// TestKubernetesDistributed: deploy/kubernetes/distributed.yaml — N
// replicas of one Deployment in the distributed mode, a
// PodDisruptionBudget of one.
func TestKubernetesDistributed(t *testing.T) {
	m := readManifest(t, "distributed.yaml")
	if len(m.deployments) != 1 {
		t.Fatalf("%d Deployments, want 1", len(m.deployments))
	}
	d := m.deployments[0]
	cfg := checkDeployment(t, m, d)
	if !cfg.Kafka.Distributed.Enabled {
		t.Error("kafka.distributed.enabled is off in the distributed manifest")
	}
	if d.Spec.Replicas == nil || *d.Spec.Replicas < 2 {
		t.Error("replicas must be at least 2")
	}
	var pdb bool
	for _, p := range m.pdbs {
		if p.Spec.Selector != nil && selects(p.Spec.Selector.MatchLabels, d.Spec.Template.Labels) &&
			p.Spec.MaxUnavailable != nil && p.Spec.MaxUnavailable.IntValue() == 1 {
			pdb = true
		}
	}
	if !pdb {
		t.Error("no PodDisruptionBudget with maxUnavailable 1 selects the replicas")
	}
}

// TestKubernetesFilesChecked: every manifest in deploy/kubernetes is one
// of those checked above.
func TestKubernetesFilesChecked(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(root, "deploy", "kubernetes", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		names = append(names, filepath.Base(f))
	}
	if want := []string{"distributed.yaml", "single.yaml"}; !slices.Equal(names, want) {
		t.Errorf("deploy/kubernetes holds %v; this package checks %v: add a test for the new file", names, want)
	}
}
