package httpapi_test

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/internal/httpapi"
)

const repoRoot = "../.."

func readYAML(t *testing.T, rel string, v any) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot, rel))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(raw, v); err != nil {
		t.Fatalf("%s: %v", rel, err)
	}
}

// mount returns the host path (relative to the repository) mounted at
// target in a short-syntax volume list.
func mount(vols []string, target string) string {
	for _, v := range vols {
		parts := strings.Split(v, ":")
		if len(parts) >= 2 && parts[1] == target {
			return filepath.Clean(parts[0])
		}
	}
	return ""
}

// TestComposeMonitoring checks the Prometheus and Grafana services of
// docker-compose.yml against the stage's config and metrics: Prometheus
// scrapes the port of the stage's operator listener (not published on the
// host; the public one is), Grafana's provisioning points at
// the mounted dashboard and data source, and every metric the dashboard
// queries is one the stage exports. (No Docker engine runs here: this is
// what can be checked without one.)
func TestComposeMonitoring(t *testing.T) {
	var compose struct {
		Services map[string]struct {
			Image   string            `yaml:"image"`
			Command []string          `yaml:"command"`
			Volumes []string          `yaml:"volumes"`
			Ports   []string          `yaml:"ports"`
			Env     map[string]string `yaml:"environment"`
		} `yaml:"services"`
	}
	readYAML(t, "docker-compose.yml", &compose)
	stage, prom, graf := compose.Services["stage"], compose.Services["prometheus"], compose.Services["grafana"]
	if prom.Image == "" || graf.Image == "" {
		t.Fatalf("docker-compose.yml lacks the prometheus or grafana service")
	}

	// The stage listens beyond loopback inside its container, explicitly:
	// the public listener for the host, the operator one for prometheus.
	cfg, err := config.Load(filepath.Join(repoRoot, "deploy", "stage.yaml"))
	if err != nil {
		t.Fatalf("deploy/stage.yaml: %v", err)
	}
	host, pubPort, err := net.SplitHostPort(cfg.HTTP.Address)
	if err != nil || config.IsLoopbackHost(host) || !cfg.HTTP.AllowRemote {
		t.Errorf("deploy/stage.yaml http %+v: want the public listener on every interface with allow_remote (the host reaches it through the published port)", cfg.HTTP)
	}
	if !slices.ContainsFunc(stage.Ports, func(p string) bool { return strings.HasSuffix(p, ":"+pubPort) && strings.HasPrefix(p, "127.0.0.1:") }) {
		t.Errorf("stage ports %v: want the dashboard port %s published on the host's loopback only", stage.Ports, pubPort)
	}
	host, port, err := net.SplitHostPort(cfg.HTTP.OperatorAddress)
	if err != nil || config.IsLoopbackHost(host) || !cfg.HTTP.OperatorAllowRemote {
		t.Errorf("deploy/stage.yaml http %+v: want the operator listener on every interface with operator_allow_remote (prometheus scrapes it from another container)", cfg.HTTP)
	}
	if slices.ContainsFunc(stage.Ports, func(p string) bool { return strings.HasSuffix(p, ":"+port) }) {
		t.Errorf("stage ports %v publish the operator port %s (/metrics: private counts) on the host", stage.Ports, port)
	}

	// Prometheus scrapes stage:PORT/metrics with the mounted config.
	cfgFlag := ""
	for _, a := range prom.Command {
		if v, ok := strings.CutPrefix(a, "--config.file="); ok {
			cfgFlag = v
		}
	}
	promFile := mount(prom.Volumes, cfgFlag)
	if cfgFlag == "" || promFile != "deploy/prometheus/prometheus.yml" {
		t.Fatalf("prometheus --config.file %q is mounted from %q, want deploy/prometheus/prometheus.yml", cfgFlag, promFile)
	}
	var pc struct {
		RuleFiles []string `yaml:"rule_files"`
		Scrape    []struct {
			Job    string `yaml:"job_name"`
			Path   string `yaml:"metrics_path"`
			Static []struct {
				Targets []string `yaml:"targets"`
			} `yaml:"static_configs"`
			DNS []struct {
				Names []string `yaml:"names"`
				Type  string   `yaml:"type"`
				Port  int      `yaml:"port"`
			} `yaml:"dns_sd_configs"`
		} `yaml:"scrape_configs"`
	}
	readYAML(t, promFile, &pc)
	// Every replica of the distributed profile is scraped on the operator
	// port of its config: Docker's DNS answers the service name with one A
	// record per replica.
	dcfg, err := config.Load(filepath.Join(repoRoot, "deploy", "stage-distributed.yaml"))
	if err != nil {
		t.Fatalf("deploy/stage-distributed.yaml: %v", err)
	}
	_, dport, err := net.SplitHostPort(dcfg.HTTP.OperatorAddress)
	if err != nil {
		t.Fatalf("deploy/stage-distributed.yaml http.operator_address: %v", err)
	}
	replica, ok := compose.Services["stage-replica"]
	if !ok || mount(replica.Volumes, "/etc/stage/config.yaml") != "deploy/stage-distributed.yaml" {
		t.Fatalf("docker-compose.yml: no stage-replica service mounting deploy/stage-distributed.yaml")
	}
	found, foundReplicas := false, false
	for _, s := range pc.Scrape {
		if s.Path != "" && s.Path != "/metrics" {
			continue
		}
		for _, sc := range s.Static {
			if slices.Contains(sc.Targets, "stage:"+port) {
				found = true
			}
			if slices.ContainsFunc(sc.Targets, func(t string) bool { return strings.HasPrefix(t, "stage-replica") }) {
				t.Errorf("job %s lists stage-replica statically: only one replica would be scraped", s.Job)
			}
		}
		for _, d := range s.DNS {
			if slices.Contains(d.Names, "stage-replica") && d.Type == "A" && strconv.Itoa(d.Port) == dport {
				foundReplicas = true
			}
		}
	}
	if !found {
		t.Errorf("prometheus does not scrape stage:%s/metrics: %+v", port, pc)
	}
	if !foundReplicas {
		t.Errorf("prometheus does not scrape every stage-replica (dns_sd_configs, type A, port %s): %+v", dport, pc)
	}
	// The alert rules are loaded from the mounted file.
	if len(pc.RuleFiles) != 1 || mount(prom.Volumes, pc.RuleFiles[0]) != "deploy/prometheus/alerts.yml" {
		t.Errorf("prometheus rule_files %v: want deploy/prometheus/alerts.yml mounted", pc.RuleFiles)
	}

	// Grafana: data source and dashboard provisioning.
	prov := mount(graf.Volumes, "/etc/grafana/provisioning")
	if prov != "deploy/grafana/provisioning" {
		t.Fatalf("grafana provisioning mounted from %q", prov)
	}
	var ds struct {
		Datasources []struct {
			UID  string `yaml:"uid"`
			Type string `yaml:"type"`
			URL  string `yaml:"url"`
		} `yaml:"datasources"`
	}
	readYAML(t, prov+"/datasources/prometheus.yml", &ds)
	if len(ds.Datasources) != 1 || ds.Datasources[0].Type != "prometheus" || ds.Datasources[0].URL != "http://prometheus:9090" {
		t.Errorf("grafana data source %+v", ds)
	}
	var dp struct {
		Providers []struct {
			Options struct {
				Path string `yaml:"path"`
			} `yaml:"options"`
		} `yaml:"providers"`
	}
	readYAML(t, prov+"/dashboards/dp-stage.yml", &dp)
	if len(dp.Providers) != 1 {
		t.Fatalf("dashboard providers %+v", dp)
	}
	dashDir := mount(graf.Volumes, dp.Providers[0].Options.Path)
	if dashDir != "deploy/grafana/dashboards" {
		t.Fatalf("dashboard provider path %q is mounted from %q", dp.Providers[0].Options.Path, dashDir)
	}
	if home := graf.Env["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]; home != "" && !strings.HasPrefix(home, dp.Providers[0].Options.Path+"/") {
		t.Errorf("home dashboard %s is not in the provisioned directory", home)
	}
	raw, err := os.ReadFile(filepath.Join(repoRoot, dashDir, "dp-stage.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title      string `json:"title"`
			Type       string `json:"type"`
			Datasource *struct {
				UID string `json:"uid"`
			} `json:"datasource"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}

	// The metrics the stage serves: docs/metrics.md (checked against
	// /metrics by TestMetricsReference).
	exported := map[string]bool{}
	doc, err := os.ReadFile(filepath.Join(repoRoot, "docs", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile("(?m)^\\| `(dpstage_[a-z0-9_]+)` \\|").FindAllStringSubmatch(string(doc), -1) {
		exported[m[1]] = true
	}
	for _, s := range []string{"_bucket", "_sum", "_count"} {
		exported[httpapi.MetricCloseToPublish+s] = true
	}
	metricRE := regexp.MustCompile(`dpstage_[a-z0-9_]+`)
	queried := map[string]bool{}
	for _, p := range dash.Panels {
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || p.Datasource.UID != ds.Datasources[0].UID {
			t.Errorf("panel %q does not use the provisioned data source", p.Title)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			for _, m := range metricRE.FindAllString(tg.Expr, -1) {
				queried[m] = true
				if !exported[m] {
					t.Errorf("panel %q queries %s, which the stage does not export", p.Title, m)
				}
			}
		}
	}
	// The dashboard covers what the issue lists: throughput, drops, lag,
	// latency, budget; and the windows released incomplete (issue 28
	// item 1).
	for _, m := range []string{httpapi.MetricEventsConsumed, httpapi.MetricEventsDropped, httpapi.MetricContribBounded,
		httpapi.MetricConsumerLag, httpapi.MetricCloseToPublish + "_bucket", httpapi.MetricBudgetSpent, httpapi.MetricBudgetRemaining,
		httpapi.MetricIncompleteWindows,
		// the distributed mode and the Schema Registry (issue 31)
		httpapi.MetricPartials, httpapi.MetricPartialGaps, httpapi.MetricPartialDataLoss, httpapi.MetricPartialsLSOHeld,
		httpapi.MetricRegistryHeld, httpapi.MetricRegistryRetries, httpapi.MetricBrokerTimeRegressionsBeyond, httpapi.MetricBuildInfo,
		// the groups selected per window and the withheld windows (issue 30)
		httpapi.MetricGroupsSelected, httpapi.MetricSelectionWithheld} {
		if !queried[m] {
			t.Errorf("the dashboard does not show %s", m)
		}
	}
}
