package httpapi

import (
	"bufio"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dpstage/stage/aggregate"
	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/ledger"
	"github.com/dpstage/stage/pipeline"
	"github.com/dpstage/stage/plan"
)

// docMetric is one row of docs/metrics.md.
type docMetric struct {
	typ    string
	labels []string // sorted
}

var docRow = regexp.MustCompile("^\\| `(dpstage_[a-z0-9_]+)` \\| ([a-z]+) \\| ([^|]*) \\|")

// readMetricsDoc parses docs/metrics.md's tables: name, type, labels.
func readMetricsDoc(t *testing.T) map[string]docMetric {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "..", "docs", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]docMetric{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		m := docRow.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		var labels []string
		for _, l := range strings.Split(m[3], ",") {
			if l = strings.Trim(strings.TrimSpace(l), "`"); l != "" && l != "—" {
				labels = append(labels, l)
			}
		}
		slices.Sort(labels)
		if _, dup := out[m[1]]; dup {
			t.Errorf("docs/metrics.md lists %s twice", m[1])
		}
		out[m[1]] = docMetric{typ: m[2], labels: labels}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(out) < 20 {
		t.Fatalf("docs/metrics.md: %d metric rows parsed; the table format moved, update this test", len(out))
	}
	return out
}

// fullSource is a stage with zero counts that has everything a stage can
// have: assigned partitions, a budget period, a plan, the cross-window
// bound's shares (one histogram with a closed window) and broker-time
// counters.
type fullSource struct {
	fakeSource
	plan *plan.Plan
}

func (f fullSource) Lag() map[int]int64 { return map[int]int64{0: 0, 1: 0} }
func (f fullSource) Plan() *plan.Plan   { return f.plan }
func (f fullSource) Budget() []pipeline.BudgetStatus {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	return []pipeline.BudgetStatus{{PeriodStart: start, PeriodEnd: start.Add(24 * time.Hour), BudgetEpsilon: 1, Remaining: 1}}
}
func (f fullSource) BrokerTimeRegressions() map[int]int64             { return nil }
func (f fullSource) BrokerTimeRegressionsBeyondMargin() map[int]int64 { return nil }
func (f fullSource) SelectionKeys() map[string]int                    { return map[string]int{"devices_by_page": 0} }
func (f fullSource) WindowBound() []aggregate.WindowShare {
	return []aggregate.WindowShare{{Histogram: "pages", Closed: true}, {Histogram: "devices"}}
}

// served is what one scrape of /metrics says of a dpstage_ metric.
type served struct {
	typ    string
	labels map[string]bool
}

var sampleLabel = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="`)

// scrape GETs /metrics from the operator handler and parses the text
// exposition's dpstage_ metrics: each TYPE line and its samples' labels.
func scrape(t *testing.T, h http.Handler) map[string]*served {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", rec.Code, rec.Body)
	}
	out := map[string]*served{}
	var cur string
	for _, line := range strings.Split(rec.Body.String(), "\n") {
		if rest, ok := strings.CutPrefix(line, "# TYPE "); ok {
			name, typ, _ := strings.Cut(rest, " ")
			cur = name
			if strings.HasPrefix(name, "dpstage_") {
				out[name] = &served{typ: typ, labels: map[string]bool{}}
			}
			continue
		}
		if line == "" || strings.HasPrefix(line, "#") || !strings.HasPrefix(cur, "dpstage_") {
			continue
		}
		name, _, _ := strings.Cut(line, "{")
		name, _, _ = strings.Cut(name, " ")
		if name != cur && !slices.Contains([]string{cur + "_bucket", cur + "_sum", cur + "_count"}, name) {
			t.Fatalf("sample %q outside its TYPE block %s", line, cur)
		}
		for _, m := range sampleLabel.FindAllStringSubmatch(line, -1) {
			if m[1] != "le" {
				out[cur].labels[m[1]] = true
			}
		}
	}
	return out
}

// TestMetricsReference: docs/metrics.md lists every dpstage_ metric that
// /metrics serves, with its type and labels, in both modes (a stage that has
// everything a stage can have, at zero counts); every metric the collectors
// describe; and nothing else. Every counter it lists is served by a stage
// with zero counts (registered at zero: alerts need no absent()).
func TestMetricsReference(t *testing.T) {
	doc := readMetricsDoc(t)
	seen := map[string]bool{}
	served := map[string]bool{} // by some config in the distributed mode
	// quickstart lists its groups; unlisted-groups has a histogram that
	// selects its groups (the selection's metrics).
	for _, example := range []string{"quickstart.yaml", "unlisted-groups.yaml"} {
		cfg, err := config.Load(filepath.Join("..", "..", "examples", example))
		if err != nil {
			t.Fatal(err)
		}
		p, err := plan.DerivePlan(cfg)
		if err != nil {
			t.Fatal(err)
		}
		referenceServed(t, doc, cfg, p, seen, served)
	}
	for name, d := range doc {
		if d.typ == "counter" && !served[name] {
			t.Errorf("counter %s is not served by a stage with zero counts: register it at zero", name)
		}
	}

	ch := make(chan *prometheus.Desc, 256)
	newStageCollector(func() Source { return nil }, true).Describe(ch)
	(&releasedCollector{}).Describe(ch)
	(&selectionMetrics{}).Describe(ch)
	close(ch)
	fq := regexp.MustCompile(`fqName: "([^"]+)"`)
	for d := range ch {
		m := fq.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("no fqName in %s", d)
		}
		seen[m[1]] = true
		if _, ok := doc[m[1]]; !ok {
			t.Errorf("the stage describes %s, which docs/metrics.md does not list", m[1])
		}
	}
	for name := range doc {
		if !seen[name] {
			t.Errorf("docs/metrics.md lists %s, which the stage neither describes nor serves", name)
		}
	}
}

// referenceServed checks what /metrics serves for cfg in both modes
// against doc, and records the names in seen, and those served in the
// distributed mode in served.
func referenceServed(t *testing.T, doc map[string]docMetric, cfg *config.Config, p *plan.Plan, seen, servedDist map[string]bool) {
	t.Helper()
	for _, distributed := range []bool{false, true} {
		c := *cfg
		c.Kafka.Distributed.Enabled = distributed
		web, err := New(Options{Config: &c})
		if err != nil {
			t.Fatal(err)
		}
		web.Attach(fullSource{fakeSource{&pipeline.Stats{}}, p})
		for _, h := range web.selMetrics.hists {
			// A window whose selection was published: the gauge of the
			// groups selected is served from then on.
			web.OnRelease(&ledger.Unit{Messages: []ledger.Message{{Value: []byte(`{"status":"groups_selected","release_id":"x","histogram":"` +
				h + `","window_start":"2026-01-01T00:00:00Z","window_end":"2026-01-01T00:00:05Z","groups":["home"]}`)}}}, time.Second)
		}
		got := scrape(t, web.OperatorHandler())
		for name, s := range got {
			seen[name] = true
			d, ok := doc[name]
			if !ok {
				t.Errorf("distributed=%v: /metrics serves %s, which docs/metrics.md does not list", distributed, name)
				continue
			}
			if d.typ != s.typ {
				t.Errorf("%s: served as a %s, docs/metrics.md says %s", name, s.typ, d.typ)
			}
			var labels []string
			for l := range s.labels {
				labels = append(labels, l)
			}
			slices.Sort(labels)
			if !slices.Equal(labels, d.labels) {
				t.Errorf("%s: served with labels %v, docs/metrics.md says %v", name, labels, d.labels)
			}
		}
		if distributed {
			for name := range got {
				servedDist[name] = true
			}
		}
	}
}
