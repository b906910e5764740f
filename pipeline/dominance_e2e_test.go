package pipeline_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/internal/e2e"
	"github.com/dpstage/stage/ledger"
	"github.com/dpstage/stage/pipeline"
)

// TestEndToEndViewAddedMidPeriod: the single-process stage over the bbolt
// release log, contribution.max_windows_per_user = 2 over 6-minute
// periods, the plan spreading the budget over the period's per-window
// curves (no rdp_epsilon). Windows 0 and 1 reserve pages' and devices'
// periods (the whole budget); a restart then adds a view (devices3,
// 3-minute windows, K = 1), which lowers every histogram's per-window
// curve and so changes their reservation keys. pages and devices keep
// releasing windows 2 and 3, covered by the reservations held (dominance),
// the period's spend unchanged; devices3's own reservation does not fit:
// the stage warns at start (naming it and the period's end) and the
// status says so (/api/budget's refused_histograms). Before the cover
// by dominance, pages and devices were budget_exhausted until the period
// ended.
func TestEndToEndViewAddedMidPeriod(t *testing.T) {
	t.Parallel()
	h := e2e.New(t)
	cfg := h.ConfigWith("mechanism: gaussian", 1)
	cfg.Contribution.MaxWindowsPerUser = 2
	cfg.Contribution.MaxTrackedUsers = 0
	cfg.Privacy.Budget.Period = config.Duration(6 * time.Minute)
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	perWindow := len(e2e.Groups) + 1
	ev := func(user string, at time.Duration) e2e.Event {
		return e2e.Event{User: user, At: e2e.Base.Add(at), Page: "home", Country: "US", Device: "mobile"}
	}

	run := h.Start(cfg)
	h.ProduceEvents([]e2e.Event{ev("a", time.Second), ev("b", time.Minute+time.Second), ev("flush", 2*time.Minute+30*time.Second)})
	h.ReadOutput(2*perWindow, 60*time.Second, 0)
	spent := run.Stage.Budget()
	run.Stop(t)

	cfg2 := *cfg
	dev := cfg.Histograms[slices.IndexFunc(cfg.Histograms, func(h config.Histogram) bool { return h.Name == "devices" })]
	dev.Name, dev.Window, dev.MaxWindowsPerUser = "devices3", config.Duration(3*time.Minute), 1
	cfg2.Histograms = append(slices.Clone(cfg.Histograms), dev)
	if err := cfg2.Validate(); err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zapcore.WarnLevel)
	run = &e2e.Running{}
	e2e.StartStage(t, run, pipeline.Options{Config: &cfg2, HashKey: &e2e.TestKey, Log: zap.New(core),
		OnRelease: func(*ledger.Unit, time.Duration) { run.Units.Add(1) }})
	h.ProduceEvents([]e2e.Event{ev("c", 2*time.Minute+40*time.Second), ev("d", 3*time.Minute+time.Second), ev("flush", 4*time.Minute+30*time.Second)})
	out := h.ReadOutput(4*perWindow, 30*time.Second, time.Second)
	var got []string
	for _, r := range out.Releases {
		if r.WindowStart >= e2e.Base.Add(2*time.Minute).Format(time.RFC3339) {
			got = append(got, fmt.Sprintf("%s@%s", r.Histogram, r.WindowStart[14:16]))
		}
	}
	for _, s := range out.Statuses {
		t.Errorf("status %s for %s@%s: %s", s.Status, s.Histogram, s.WindowStart, s.Message)
	}
	if len(got) != 2*perWindow {
		t.Errorf("windows 2 and 3 after the view was added: %d releases %v, want %d", len(got), got, 2*perWindow)
	}
	after := run.Stage.Budget()
	if len(spent) == 0 || len(after) == 0 || after[len(after)-1].SpentEpsilon != spent[len(spent)-1].SpentEpsilon {
		t.Errorf("period spend before %+v, after %+v; want unchanged", spent, after)
	} else if r := after[len(after)-1].RefusedHistograms; fmt.Sprint(r) != "[devices3]" {
		t.Errorf("refused reservations %v, want [devices3]", r)
	}
	var warned []string
	for _, e := range logs.FilterMessageSnippet("period reservation does not fit").All() {
		f := e.ContextMap()
		warned = append(warned, fmt.Sprint(f["histogram"], " until ", f["releases_resume"]))
	}
	if want := "[devices3 until " + e2e.Base.Add(6*time.Minute).Format(time.RFC3339) + "]"; fmt.Sprint(warned) != want {
		t.Errorf("start warnings %v, want %s", warned, want)
	}
}
