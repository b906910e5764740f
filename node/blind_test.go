package node

import (
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/dpstage/stage/config"
)

// TestBlindWarningNamesTheViewsBound (issue 28 items 2 and 5): the
// window-bound warning of a view (a histogram with its own window and
// histograms[].max_windows_per_user) names that key with its value — the
// one that dropped its users — not contribution.max_windows_per_user,
// which bounds only the histograms at window.size; and it points at stage
// plan with privacy.expected_windows_per_user instead of "raise K".
func TestBlindWarningNamesTheViewsBound(t *testing.T) {
	cfg := &config.Config{
		Window: config.Window{Size: config.Duration(time.Minute)},
		Histograms: []config.Histogram{
			{Name: "pages", Field: "page", Bins: []string{"a", "b"}},
			{Name: "pages1h", Field: "page", Bins: []string{"a", "b"}, Window: config.Duration(time.Hour), MaxWindowsPerUser: 3},
		},
		Contribution: config.Contribution{MaxEventsPerUser: 1, MaxGroupsPerUser: 1, MaxWindowsPerUser: 5, BlindWarningShare: 0.5},
	}
	core, logs := observer.New(zapcore.WarnLevel)
	s := &Node{Cfg: cfg, Log: zap.New(core), Blind: blindWatch(cfg)}
	hour := time.Hour.Milliseconds()
	s.NoteWindowBound([]WindowBound{{H: 0, Start: hour - 60_000, End: hour, Counted: 1, Dropped: 9}, {H: 1, Start: 0, End: hour, Counted: 1, Dropped: 9}})
	warned := map[string]string{}
	for _, e := range logs.All() {
		h, _ := e.ContextMap()["histogram"].(string)
		warned[h] = e.Message
	}
	for _, tc := range []struct{ hist, key, other string }{
		{"pages", "contribution.max_windows_per_user (K = 5)", "histograms[0].max_windows_per_user"},
		{"pages1h", "histograms[1].max_windows_per_user (K = 3)", "contribution.max_windows_per_user"},
	} {
		msg, ok := warned[tc.hist]
		if !ok {
			t.Errorf("%s: no warning (%d logged)", tc.hist, logs.Len())
			continue
		}
		for _, want := range []string{tc.key, "stage plan", "privacy.expected_windows_per_user"} {
			if !strings.Contains(msg, want) {
				t.Errorf("%s: warning lacks %q: %s", tc.hist, want, msg)
			}
		}
		for _, not := range []string{tc.other, "raise"} {
			if strings.Contains(msg, not) {
				t.Errorf("%s: warning says %q: %s", tc.hist, not, msg)
			}
		}
	}
	if blindWatch(&config.Config{Histograms: cfg.Histograms}) != nil {
		t.Error("a BlindWatch without the bound")
	}
}
