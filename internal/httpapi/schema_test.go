package httpapi_test

import (
	"encoding/json"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/dpstage/stage/release"
)

// jsonKeys lists the key paths of the JSON encoding of type t (a.b for
// nested objects, a[] for list items).
func jsonKeys(t reflect.Type, prefix string, out map[string]bool) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Struct:
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if f.Anonymous && name == "" {
				jsonKeys(f.Type, prefix, out)
				continue
			}
			if name == "-" || !f.IsExported() {
				continue
			}
			if name == "" {
				name = f.Name
			}
			p := join(prefix, name)
			out[p] = true
			jsonKeys(f.Type, p, out)
		}
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Struct {
			jsonKeys(t.Elem(), prefix+"[]", out)
		}
	}
}

func join(prefix, name string) string {
	if prefix == "" {
		return name
	}
	return prefix + "." + name
}

func schemaOf(v any) map[string]bool {
	out := map[string]bool{}
	jsonKeys(reflect.TypeOf(v), "", out)
	return out
}

var (
	// releaseSchema: a release or a status message, as the topic carries them.
	releaseSchema = union(schemaOf(release.Release{}), schemaOf(release.Status{}))
	budgetSchema  = map[string]bool{"budget_epsilon": true, "delta": true, "period_seconds": true, "periods": true,
		"periods[].period_start": true, "periods[].period_end": true, "periods[].spent_epsilon": true,
		"periods[].budget_epsilon": true, "periods[].remaining_epsilon": true, "periods[].delta": true,
		"charging": true, "note": true, // how the public config charges a period (issue 23 item 3)
		"total_delta": true} // the guarantee's δ with the user-hash collision term (issue 28 item 5)
	layoutSchema = map[string]bool{"histograms": true, "histograms[].name": true, "histograms[].bins": true,
		"histograms[].groups": true, "histograms[].window_seconds": true, "window_seconds": true, "mechanism": true, "calibration": true, "interval_level": true,
		"budget_charging": true,
		// When this stage started (issue 29 item 4): the page marks the window
		// in progress then. Public: a fact of the deployment.
		"started_at": true,
		// Each view's bound and the plan's prediction for it (issue 23):
		// public config only (TestLayoutPlannedViews).
		"histograms[].max_windows_per_user": true, "histograms[].windows_per_period": true, "histograms[].planned": true,
		"histograms[].planned.windows_per_user": true, "histograms[].planned.base_windows_per_period": true,
		"histograms[].planned.active_windows": true, "histograms[].planned.counted_share_at_end": true,
		"histograms[].planned.half_after_seconds": true, "histograms[].planned.blind_after_seconds": true,
		"histograms[].planned.l2_first": true, "histograms[].planned.l2_last": true, "histograms[].planned.mean_l2": true,
		"histograms[].planned.uniform_l2": true, "histograms[].planned.verdict": true, "histograms[].planned.text": true}
)

func union(a, b map[string]bool) map[string]bool {
	out := map[string]bool{}
	for k := range a {
		out[k] = true
	}
	for k := range b {
		out[k] = true
	}
	return out
}

// checkKeys fails unless every key path in the JSON document is in allowed:
// nothing the API or the page's data endpoints serve may carry a field
// beyond the published schema (no count, no total, no user number).
func checkKeys(t *testing.T, what string, doc []byte, allowed map[string]bool) {
	t.Helper()
	var v any
	if err := json.Unmarshal(doc, &v); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	var bad []string
	var walk func(v any, path string)
	walk = func(v any, path string) {
		switch x := v.(type) {
		case map[string]any:
			for k, c := range x {
				p := join(path, k)
				if !allowed[p] {
					bad = append(bad, p)
				}
				walk(c, p)
			}
		case []any:
			for _, c := range x {
				walk(c, path+"[]")
			}
		}
	}
	walk(v, "")
	if len(bad) > 0 {
		sort.Strings(bad)
		t.Errorf("%s carries keys outside its schema: %v", what, bad)
	}
}

// TestReleaseSchemaHasNoCounts pins the published schema itself: the
// numbers derived from the data are the private draws — probabilities,
// posterior_alpha, intervals and the private total (issue 29: a noisy
// count with its interval, never the exact one).
func TestReleaseSchemaHasNoCounts(t *testing.T) {
	// params.users is an average histogram's configured public N_pub
	// (histograms[].average.users), never the number of contributors
	// (pipeline/average_e2e_test.go checks it equals the config).
	// total.* is the private total: post-processing of the additive
	// mechanisms' noisy counts, or a charged discrete Gaussian count
	// (plan.TotalPlan); params.total_sigma and privacy.total_rdp_epsilon
	// are its public noise and cost.
	public := map[string]bool{"params.users": true, "total": true, "total.estimate": true, "total.low": true, "total.high": true,
		"params.total_sigma": true, "privacy.total_rdp_epsilon": true}
	for k := range releaseSchema {
		if public[k] {
			continue
		}
		for _, bad := range []string{"count", "total", "events", "users", "n"} {
			if k == bad || strings.HasSuffix(k, "."+bad) || strings.Contains(k, "count") {
				t.Errorf("release schema has key %q", k)
			}
		}
	}
}
