package httpapi_test

import (
	"bytes"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/internal/httpapi"
	"github.com/dpstage/stage/ledger"
	"github.com/dpstage/stage/pipeline"
)

// viewsConfig is testConfig with a day of 1-minute windows, pages at
// window.size (K = 5), its hourly (K_h = 24) and daily (K_h = 1) views,
// Gaussian, and the activity figure m (0: not given).
func viewsConfig(t *testing.T, m float64) *config.Config {
	t.Helper()
	cfg := testConfig(t, "", nil)
	cfg.Window.Size, cfg.Privacy.Budget.Period = config.Duration(time.Minute), config.Duration(24*time.Hour)
	cfg.Privacy.Mechanism, cfg.Privacy.Calibration = config.MechanismGaussian, ""
	cfg.Privacy.ExpectedEventsPerRelease, cfg.Privacy.ExpectedWindowsPerUser = 3000, m
	cfg.Contribution.MaxWindowsPerUser, cfg.Contribution.MaxTrackedUsers = 5, 0
	for _, v := range []struct {
		name string
		size time.Duration
		k    int
	}{{"pages_1h", time.Hour, 24}, {"pages_24h", 24 * time.Hour, 1}} {
		h := cfg.Histograms[0]
		h.Name, h.Window, h.MaxWindowsPerUser = v.name, config.Duration(v.size), v.k
		cfg.Histograms = append(cfg.Histograms, h)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// layoutOf serves cfg and returns its /api/layout body; with data, the
// server first stores releases and is attached to a source whose counts,
// drops and budget are the data's.
func layoutOf(t *testing.T, cfg *config.Config, data bool) []byte {
	t.Helper()
	// One start time for every server compared (started_at is the
	// process's, not the data's).
	srv, err := httpapi.New(httpapi.Options{Config: cfg, StartedAt: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)})
	if err != nil {
		t.Fatal(err)
	}
	if data {
		st := &pipeline.Stats{}
		st.Consumed.Store(918_273_645)
		st.Counted.Store(846_152_937)
		srv.Attach(blindSource{countingSource{st}})
		for w := range 30 {
			srv.OnRelease(&ledger.Unit{Messages: []ledger.Message{{Value: releaseMsg("pages", "US", w, 0.4)}}}, 0)
		}
	}
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	code, _, body := get(t, ts.URL+"/api/layout", "")
	if code != 200 {
		t.Fatalf("/api/layout: %d", code)
	}
	return body
}

// TestLayoutPlannedViews (issue 23): with privacy.expected_windows_per_user
// = 720 (half of a day's minutes) /api/layout carries, per count view, the
// plan's prediction from the public config: the minute view (K = 5)
// counts (almost) none of its returning users after about 16 minutes, the
// hourly (24 of 24) and daily views count every active user all day; each
// text says it is a prediction, not a measurement. The layout is a
// function of the config only: identical with and without releases, stats
// and drops, and without the figure there is no prediction.
func TestLayoutPlannedViews(t *testing.T) {
	t.Parallel()
	cfg := viewsConfig(t, 720)
	body := layoutOf(t, cfg, false)
	var l httpapi.Layout
	if err := json.Unmarshal(body, &l); err != nil || len(l.Histograms) != 3 {
		t.Fatalf("layout %s: %v", body, err)
	}
	checkKeys(t, "/api/layout", body, layoutSchema)
	for i, want := range [][]string{
		{"Planned for users active in up to 720 of the 1,440 windows (1 minute each) of a day", "a user counts in at most 5 of this view's windows a day",
			"this view counts (almost) none of them after about 16 minutes of each day"},
		{"that is in about 24 of this view's 24 windows (1 hour each)", "this view counts every active user all day", "(useful;"},
		{"this view counts every active user all day", "(useful;"},
	} {
		p := l.Histograms[i].Planned
		if p == nil {
			t.Fatalf("%s: no planned view", l.Histograms[i].Name)
		}
		for _, w := range append(want, "This is a prediction from the public configuration, not a measurement of the data.") {
			if !strings.Contains(p.Text, w) {
				t.Errorf("%s: planned text lacks %q:\n%s", l.Histograms[i].Name, w, p.Text)
			}
		}
		if blind := p.BlindAfterSeconds != nil; blind != (i == 0) || (blind && *p.BlindAfterSeconds != 16*60) {
			t.Errorf("%s: blind after %v", l.Histograms[i].Name, p.BlindAfterSeconds)
		}
	}
	if with := layoutOf(t, cfg, true); !bytes.Equal(with, body) {
		t.Errorf("/api/layout depends on the data:\nwithout: %s\nwith:    %s", body, with)
	}
	if !bytes.Equal(layoutOf(t, viewsConfig(t, 720), true), body) {
		t.Errorf("/api/layout differs between two servers of the same config")
	}
	if other := layoutOf(t, viewsConfig(t, 0), false); bytes.Contains(other, []byte(`"planned"`)) {
		t.Errorf("a prediction without privacy.expected_windows_per_user: %s", other)
	}
}
