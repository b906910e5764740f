package httpapi_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/segmentio/kafka-go"

	"github.com/dpstage/stage/internal/e2e"
	"github.com/dpstage/stage/internal/httpapi"
	"github.com/dpstage/stage/pipeline"
	"github.com/dpstage/stage/release"
)

var base = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func event(user string, at time.Duration, page, country, device string) kafka.Message {
	m := map[string]any{"ts": base.Add(at).UnixMilli(), "page": page, "country": country, "device": device}
	if user != "" {
		m["user_id"] = user
	}
	b, _ := json.Marshal(m)
	return kafka.Message{Key: []byte(user), Value: b}
}

// TestMetricsAfterKnownStream drives a real stage over the embedded broker
// with a known event stream and checks /metrics against the counts worked
// out by hand, then the API against the output topic.
func TestMetricsAfterKnownStream(t *testing.T) {
	e := newEnv(t, "1m", "", nil)
	e.start()
	// Window [0, 1m):
	//   u1 home US mobile: pages/US home, devices mobile
	//   u2 search DE desktop: pages/DE search, devices desktop
	//   u3 cart US tablet: pages/US other (overflow bin); devices out_of_domain
	//   u1 again, the same event: bounded in both histograms
	//   (max_events_per_user 1; an identical event ranks equal, so it adds
	//   nothing whatever the hash seed)
	//   u4 home FR mobile: pages unknown_group; devices mobile
	//   one malformed message (bad_json), one without a user (missing_user)
	e.produce(
		event("u1", 1*time.Second, "home", "US", "mobile"),
		event("u2", 2*time.Second, "search", "DE", "desktop"),
		event("u3", 3*time.Second, "cart", "US", "tablet"),
		event("u1", 1*time.Second, "home", "US", "mobile"),
		event("u4", 5*time.Second, "home", "FR", "mobile"),
		kafka.Message{Key: []byte("x"), Value: []byte(`{not json`)},
		kafka.Message{Key: []byte("y"), Value: []byte(fmt.Sprintf(`{"ts":%d,"page":"home"}`, base.UnixMilli()))},
	)
	// Window [1m, 2m): moves the watermark past the first window's end.
	e.produce(event("u5", 61*time.Second, "home", "US", "mobile"))

	st := e.stage.Stats()
	e2e.WaitFor(t, "the first window's 3 releases", 20*time.Second, func() bool { return st.Releases.Load() == 3 })
	// An event for the closed window is late.
	e.produce(event("u6", 10*time.Second, "home", "US", "mobile"))
	e2e.WaitFor(t, "the late event", 20*time.Second, func() bool { return st.Late.Load() == 1 })

	reg := e.web.Registry()
	want := `
# HELP dpstage_events_consumed_total Messages read from the input topic.
# TYPE dpstage_events_consumed_total counter
dpstage_events_consumed_total 9
# HELP dpstage_events_decoded_total Messages that decoded into a usable event.
# TYPE dpstage_events_decoded_total counter
dpstage_events_decoded_total 7
# HELP dpstage_contributions_counted_total (event, histogram) contributions counted (or, for an average histogram, averaged) into a window on arrival; those later displaced are also counted in dpstage_contributions_dropped_by_bounding_total{bound="displaced"}.
# TYPE dpstage_contributions_counted_total counter
dpstage_contributions_counted_total 8
# HELP dpstage_late_events_total Events for windows already closed (also counted in dpstage_events_dropped_total{reason="late"}).
# TYPE dpstage_late_events_total counter
dpstage_late_events_total 1
# HELP dpstage_releases_published_total Release messages published to the output topic (one per histogram, group and window).
# TYPE dpstage_releases_published_total counter
dpstage_releases_published_total 3
# HELP dpstage_budget_exhausted_total (histogram, window) units refused by the privacy budget (a budget_exhausted status message was published instead).
# TYPE dpstage_budget_exhausted_total counter
dpstage_budget_exhausted_total 0
# HELP dpstage_contributions_dropped_by_bounding_total Contributions dropped by per-user contribution bounding, by bound (on arrival: user_events: max_events_per_user; user_groups: max_groups_per_user; capacity: max_tracked_users; average_users: an average histogram's vector from a user not among the window's average.users kept users at arrival; later: displaced: counted on arrival, then pushed out by a smaller-hash event or group of the same user, or by the user's eviction from a full window, net of contributions let back in; windows: max_windows_per_user, on arrival or at the window's close).
# TYPE dpstage_contributions_dropped_by_bounding_total counter
dpstage_contributions_dropped_by_bounding_total{bound="average_users"} 0
dpstage_contributions_dropped_by_bounding_total{bound="capacity"} 0
dpstage_contributions_dropped_by_bounding_total{bound="displaced"} 0
dpstage_contributions_dropped_by_bounding_total{bound="user_events"} 2
dpstage_contributions_dropped_by_bounding_total{bound="user_groups"} 0
dpstage_contributions_dropped_by_bounding_total{bound="windows"} 0
# HELP dpstage_events_dropped_total Events (or, for missing_field, out_of_domain, unknown_group, unsampled_key, key_too_long, bad_vector and a histogram's wrong_type, one histogram's part of an event) dropped, by reason.
# TYPE dpstage_events_dropped_total counter
dpstage_events_dropped_total{reason="bad_json"} 1
dpstage_events_dropped_total{reason="bad_time"} 0
dpstage_events_dropped_total{reason="bad_vector"} 0
dpstage_events_dropped_total{reason="invalid_utf8"} 0
dpstage_events_dropped_total{reason="key_too_long"} 0
dpstage_events_dropped_total{reason="late"} 1
dpstage_events_dropped_total{reason="missing_field"} 0
dpstage_events_dropped_total{reason="missing_time"} 0
dpstage_events_dropped_total{reason="missing_user"} 1
dpstage_events_dropped_total{reason="out_of_domain"} 1
dpstage_events_dropped_total{reason="oversized"} 0
dpstage_events_dropped_total{reason="time_too_far_ahead"} 0
dpstage_events_dropped_total{reason="undecodable"} 0
dpstage_events_dropped_total{reason="unknown_group"} 1
dpstage_events_dropped_total{reason="unknown_magic_byte"} 0
dpstage_events_dropped_total{reason="unknown_schema_id"} 0
dpstage_events_dropped_total{reason="unsampled_key"} 0
dpstage_events_dropped_total{reason="wrong_partition"} 0
dpstage_events_dropped_total{reason="wrong_type"} 0
# HELP dpstage_ready 1 when the stage is ready (as /readyz), else 0.
# TYPE dpstage_ready gauge
dpstage_ready 1
# HELP dpstage_mechanism_info The mechanism and calibration in use (value 1).
# TYPE dpstage_mechanism_info gauge
dpstage_mechanism_info{calibration="concentrated",mechanism="dirichlet",neighbour="replace",order="2"} 1
# HELP dpstage_budget_epsilon The period's total privacy budget ε (privacy.budget.epsilon).
# TYPE dpstage_budget_epsilon gauge
dpstage_budget_epsilon 10
# HELP dpstage_budget_charges_per_period charges the plan makes per period: one per (histogram, window), or with max_windows_per_user one period reservation per histogram.
# TYPE dpstage_budget_charges_per_period gauge
dpstage_budget_charges_per_period 120
`
	names := []string{"dpstage_events_consumed_total", "dpstage_events_decoded_total", "dpstage_contributions_counted_total",
		"dpstage_late_events_total", "dpstage_releases_published_total", "dpstage_budget_exhausted_total",
		"dpstage_contributions_dropped_by_bounding_total", "dpstage_events_dropped_total", "dpstage_ready",
		"dpstage_mechanism_info", "dpstage_budget_epsilon", "dpstage_budget_charges_per_period"}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}

	// The remaining metrics: values that come from the plan and the stream.
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			key := mf.GetName()
			for _, l := range m.GetLabel() {
				key += "," + l.GetName() + "=" + l.GetValue()
			}
			switch {
			case m.GetHistogram() != nil:
				got[key+",count"] = float64(m.GetHistogram().GetSampleCount())
			case m.GetCounter() != nil:
				got[key] = m.GetCounter().GetValue()
			default:
				got[key] = m.GetGauge().GetValue()
			}
		}
	}
	plan := e.stage.Plan()
	params := plan.Count.Mechanism.Params()
	for key, v := range map[string]float64{
		"dpstage_window_close_to_publish_seconds,count": 2, // one per (histogram, window) unit
		"dpstage_mechanism_alpha":                       params.Alpha,
		"dpstage_mechanism_r":                           params.R,
		"dpstage_release_rdp_epsilon,order=2":           plan.Count.Mechanism.RDP(2),
		"dpstage_budget_delta":                          1e-6,
	} {
		if g, ok := got[key]; !ok || math.Abs(g-v) > 1e-12*math.Max(1, math.Abs(v)) {
			t.Errorf("%s = %v (present %v), want %v", key, g, ok, v)
		}
	}
	for p := range 4 {
		if _, ok := got[fmt.Sprintf("dpstage_consumer_lag,partition=%d", p)]; !ok {
			t.Errorf("no consumer lag for partition %d", p)
		}
	}
	budget := e.stage.Budget()
	if len(budget) != 1 {
		t.Fatalf("budget periods %v", budget)
	}
	// Labels come sorted by name: period_end, period_start, scope.
	labels := ",period_end=" + budget[0].PeriodEnd.Format(time.RFC3339) + ",period_start=" + budget[0].PeriodStart.Format(time.RFC3339) + ",scope=period"
	spent, remaining := got["dpstage_budget_spent_epsilon"+labels], got["dpstage_budget_remaining_epsilon"+labels]
	if spent <= 0 || math.Abs(spent+remaining-10) > 1e-9 {
		t.Errorf("budget spent %v + remaining %v, want > 0 and a sum of 10 (%v)", spent, remaining, got)
	}

	// The API serves exactly the topic's messages.
	topic := e.readTopic(3)
	code, _, body := e.get("/api/releases", "")
	if code != http.StatusOK {
		t.Fatalf("/api/releases: %d %s", code, body)
	}
	var api []json.RawMessage
	e2e.DecodeJSON(t, body, &api)
	if len(api) != len(topic) {
		t.Fatalf("/api/releases has %d messages, the topic %d", len(api), len(topic))
	}
	for _, m := range api {
		if !slices.ContainsFunc(topic, func(v []byte) bool { return bytes.Equal(v, m) }) {
			t.Errorf("API message not byte-identical to any topic message:\n%s", m)
		}
		checkKeys(t, "/api/releases item", m, releaseSchema)
	}
	// The budget the API reports is the one the newest release carries.
	var newest release.Release
	e2e.DecodeJSON(t, api[0], &newest)
	code, _, body = e.get("/api/budget", "")
	var bv httpapi.BudgetView
	e2e.DecodeJSON(t, body, &bv)
	if code != http.StatusOK || len(bv.Periods) != 1 || bv.Periods[0].SpentEpsilon != newest.Privacy.SpentEpsilon ||
		bv.BudgetEpsilon != newest.Privacy.BudgetEpsilon || bv.Delta != newest.Privacy.Delta {
		t.Errorf("/api/budget %d %s; newest release privacy %+v", code, body, newest.Privacy)
	}
	checkKeys(t, "/api/budget", body, budgetSchema)
	_, _, body = e.get("/api/layout", "")
	checkKeys(t, "/api/layout", body, layoutSchema)

	// Filters and limits.
	for _, tc := range []struct {
		query string
		code  int
		n     int
		check func(release.Release) bool
	}{
		{"histogram=pages", 200, 2, func(r release.Release) bool { return r.Histogram == "pages" }},
		{"histogram=pages&group=DE", 200, 1, func(r release.Release) bool { return r.Group == "DE" }},
		{"group=*", 200, 1, func(r release.Release) bool { return r.Histogram == "devices" }},
		{"limit=1", 200, 1, nil},
		{"histogram=nope", 404, 0, nil},
		{"histogram=devices&group=US", 404, 0, nil},
		{"limit=0", 400, 0, nil},
		{"limit=abc", 400, 0, nil},
	} {
		code, _, body := e.get("/api/releases?"+tc.query, "")
		if code != tc.code {
			t.Errorf("?%s: %d %s, want %d", tc.query, code, body, tc.code)
			continue
		}
		if code != 200 {
			continue
		}
		var rs []release.Release
		e2e.DecodeJSON(t, body, &rs)
		if len(rs) != tc.n {
			t.Errorf("?%s: %d releases, want %d", tc.query, len(rs), tc.n)
		}
		for _, r := range rs {
			if tc.check != nil && !tc.check(r) {
				t.Errorf("?%s returned %s/%s", tc.query, r.Histogram, r.Group)
			}
		}
	}
	// Unchanged releases: 304 on the ETag.
	_, h, _ := e.get("/api/releases", "")
	req, _ := http.NewRequest(http.MethodGet, e.url+"api/releases", nil)
	req.Header.Set("If-None-Match", h.Get("ETag"))
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusNotModified {
		t.Errorf("If-None-Match %s: %d, want 304", h.Get("ETag"), res.StatusCode)
	}
}

// TestReadinessTransitions: 503 before the stage is attached and running,
// 200 once it has loaded its state, connected and been assigned partitions,
// 503 again while it drains.
func TestReadinessTransitions(t *testing.T) {
	e := newEnv(t, "1m", "", nil)
	type body struct {
		Ready bool `json:"ready"`
		pipeline.Readiness
	}
	read := func() (int, body) {
		code, _, b := e.get("/readyz", "")
		var v body
		e2e.DecodeJSON(t, b, &v)
		checkKeys(t, "/readyz", b, map[string]bool{"ready": true, "state_loaded": true, "connected": true, "assigned": true, "draining": true, "standby": true, "releasing": true})
		return code, v
	}
	if code, v := read(); code != http.StatusServiceUnavailable || v.Ready || v.StateLoaded || v.Connected {
		t.Errorf("before the stage: %d %+v", code, v)
	}
	if code, _, _ := e.get("/healthz", ""); code != http.StatusOK {
		t.Errorf("/healthz before the stage: %d", code)
	}
	e.start()
	e2e.WaitFor(t, "ready", 20*time.Second, func() bool { code, _ := read(); return code == http.StatusOK })
	if _, v := read(); !v.Ready || !v.StateLoaded || !v.Connected || !v.Assigned || v.Draining {
		t.Errorf("ready: %+v", v)
	}
	e.stopStage()
	code, v := read()
	if code != http.StatusServiceUnavailable || v.Ready || !v.Draining {
		t.Errorf("after the drain: %d %+v", code, v)
	}
	if code, _, _ := e.get("/healthz", ""); code != http.StatusOK {
		t.Errorf("/healthz while the process lives: %d", code)
	}
}
