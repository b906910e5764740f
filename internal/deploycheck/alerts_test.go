package deploycheck

import (
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
)

// root is the repository root, relative to this package's directory.
const root = "../.."

// documentedMetrics returns the dpstage_ names docs/metrics.md lists
// (checked against /metrics by internal/httpapi's TestMetricsReference).
func documentedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "docs", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `(dpstage_[a-z0-9_]+)` \\|").FindAllStringSubmatch(string(b), -1) {
		out[m[1]] = true
	}
	if len(out) < 20 {
		t.Fatalf("docs/metrics.md: %d metrics parsed; its table format moved, update this test", len(out))
	}
	return out
}

// TestAlertRules: deploy/prometheus/alerts.yml is a valid Prometheus rule
// file (rulefmt, strict: unknown fields refused; every expression parsed
// by PromQL's parser, every template checked); every metric a rule reads
// is one the stage serves (docs/metrics.md), with a histogram's series
// suffixes; and the conditions each have a rule.
func TestAlertRules(t *testing.T) {
	path := filepath.Join(root, "deploy", "prometheus", "alerts.yml")
	p := parser.NewParser(parser.Options{})
	groups, errs := rulefmt.ParseFile(path, false, model.UTF8Validation, p, slog.New(slog.DiscardHandler))
	for _, err := range errs {
		t.Error(err)
	}
	if len(errs) > 0 {
		return
	}
	doc := documentedMetrics(t)
	used := map[string]bool{}
	alerts := 0
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			alerts++
			if r.Annotations["summary"] == "" || r.Labels["severity"] == "" {
				t.Errorf("alert %s: give it a summary annotation and a severity label", r.Alert)
			}
			expr, err := p.ParseExpr(r.Expr)
			if err != nil {
				t.Errorf("alert %s: %v", r.Alert, err)
				continue
			}
			parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
				vs, ok := n.(*parser.VectorSelector)
				if !ok {
					return nil
				}
				name := vs.Name
				if !strings.HasPrefix(name, "dpstage_") {
					t.Errorf("alert %s reads %q: not a metric of the stage", r.Alert, vs.String())
					return nil
				}
				base := name
				for _, suf := range []string{"_bucket", "_sum", "_count"} {
					if b, ok := strings.CutSuffix(name, suf); ok && doc[b] {
						base = b
					}
				}
				if !doc[base] {
					t.Errorf("alert %s reads %s, which the stage does not serve (docs/metrics.md)", r.Alert, name)
				}
				used[base] = true
				return nil
			})
		}
	}
	// The conditions issue 31 asks rules for, by the metric that shows each.
	for _, m := range []string{
		"dpstage_ready",                                              // not ready
		"dpstage_consumer_lag",                                       // lag
		"dpstage_partial_gaps",                                       // partial gaps
		"dpstage_partials_data_loss_total",                           // partials data loss
		"dpstage_budget_exhausted_total",                             // budget exhausted
		"dpstage_window_bound_blind",                                 // a window-bound blind view
		"dpstage_schema_registry_held_partitions",                    // a Schema Registry hold
		"dpstage_source_broker_time_regressions_beyond_margin_total", // broker-time regressions beyond the margin
		"dpstage_selection_withheld_total",                           // a window's group selection withheld (issue 30)
	} {
		if !used[m] {
			t.Errorf("no alert rule reads %s", m)
		}
	}
	if alerts == 0 {
		t.Fatal("no alert rule parsed")
	}
}
