package httpapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/ledger"
	"github.com/dpstage/stage/plan"
	"github.com/dpstage/stage/release"
)

// # Histograms that select their groups (issue 30)
//
// A histogram with group_by and no listed groups (config.Histogram.Selects)
// releases in each window only the groups its private selection keeps
// (package selection). For each (histogram, window) the output topic
// carries one status message — release.StatusGroupsSelected naming the
// selected groups (possibly none), or release.StatusSelectionWithheld —
// and one release per selected group. The public surface shows exactly
// that: /api/selections lists, per window, the status and the selected
// groups as published, with the selection's public parameters in words;
// /api/layout carries the same parameters from the plan (public config)
// before the first window closes; the page draws a card per group of the
// newest selection. A group never selected appears nowhere: the store
// holds published messages only, and a query for a group of a selecting
// histogram answers like any other group's (no 404 that would tell
// "never released" from "evicted").
//
// The operator metrics of the selection (MetricGroupsSelected,
// MetricSelectionWithheld) are counted here too, from the same published
// status messages; the tracked keys per window (MetricSelectionKeys) are
// private and read from the stage (SelectionKeysSource).

// SelectionView is the public description of how a histogram's groups are
// selected: the Selection block every status message and selected release
// carries (from the plan's calibration, in /api/layout, before any window:
// without the charge id, which names a period), and Text, what it means for
// a reader of the dashboard.
type SelectionView struct {
	release.Selection
	Text string `json:"text"`
}

// newSelectionView describes s in words.
func newSelectionView(s release.Selection) *SelectionView {
	s.Withheld = false // a window's, not the selection's
	return &SelectionView{Selection: s, Text: SelectionText(s)}
}

// SelectionText says what a selection's parameters mean for a reader of
// the dashboard.
func SelectionText(s release.Selection) string {
	t := fmt.Sprintf("The groups are not listed in advance: in each window only the groups that pass a private selection are shown. "+
		"A group is shown in a window with probability ½ at about %s distinct users and 0.95 at about %s; smaller groups are hidden, "+
		"so a group that appears and disappears is near the threshold — not a bug; absence never means zero users.",
		fmtUsers(s.UsersAtHalf), fmtUsers(s.UsersAt95))
	if s.KeySampleRate > 0 && s.KeySampleRate < 1 {
		t += fmt.Sprintf(" Only a fixed sample of about %s of all possible group names can ever be shown, chosen by a public hash of the name, not by the data.",
			strconv.FormatFloat(100*s.KeySampleRate, 'g', 3, 64)+"%")
	}
	return t
}

// fmtUsers writes n with thousands separators.
func fmtUsers(n int64) string {
	s := strconv.FormatInt(n, 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// WithheldText says in words what a window withheld by the key-count test
// means.
const WithheldText = "Selection withheld: this window's number of distinct group keys, tested with noise, reached the limit the stage tracks per window " +
	"(selection.max_keys_per_window), so no group of it is shown. It says nothing about any one group; the operators can raise the limit or sample the keys (selection.key_sample_rate)."

// NoneSelectedText is the words of a window in which no group passed.
const NoneSelectedText = "No group passed the selection in this window. That does not mean no users: every group had too few to be shown reliably."

// planSelection is the selection of cfg's selecting histograms as the plan
// calibrates it (public config only), nil without one.
func planSelection(cfg *config.Config, p *plan.Plan) *release.Selection {
	if p == nil || p.Selection == nil {
		return nil
	}
	th := p.Selection.Selection.Threshold
	return &release.Selection{Threshold: th.T, Sigma: th.Sigma, UsersAtHalf: th.UsersAt(0.5), UsersAt95: th.UsersAt(0.95),
		WindowDelta: th.WindowDelta(), MaxKeysPerWindow: cfg.Selection.MaxKeysPerWindow, KeySampleRate: cfg.Selection.KeySampleRate,
		Epsilon: p.Selection.Epsilon, Delta: p.Selection.Delta}
}

// SelectionWindow is one window of a selecting histogram, as its status
// message says: Status is release.StatusGroupsSelected (Groups, Selected =
// len(Groups), possibly 0), release.StatusSelectionWithheld or
// budget_exhausted; Text says it in words.
type SelectionWindow struct {
	WindowStart string   `json:"window_start"`
	WindowEnd   string   `json:"window_end"`
	Status      string   `json:"status"`
	Selected    int      `json:"selected"`
	Groups      []string `json:"groups"`
	Text        string   `json:"text"`
}

// HistogramSelections is one selecting histogram's recent windows, newest
// first. Selection is the newest status message's (what was applied),
// else the plan's.
type HistogramSelections struct {
	Name      string            `json:"name"`
	Selection *SelectionView    `json:"selection,omitempty"`
	Windows   []SelectionWindow `json:"windows"`
}

// SelectionsView is the body of /api/selections.
type SelectionsView struct {
	Histograms []HistogramSelections `json:"histograms"`
}

// selections is /api/selections: the selecting histograms' recent windows
// (?histogram= one of them; ?limit= windows each, 1 to maxLimit, default
// and at most the store's history).
func (s *Server) selections(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	hist := q.Get("histogram")
	limit := s.history
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxLimit {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": fmt.Sprintf("limit must be a whole number from 1 to %d", maxLimit)})
			return
		}
		limit = min(n, s.history)
	}
	v := SelectionsView{Histograms: []HistogramSelections{}}
	for _, h := range s.cfg.Histograms {
		if !h.Selects() || hist != "" && h.Name != hist {
			continue
		}
		v.Histograms = append(v.Histograms, s.histogramSelections(h.Name, limit))
	}
	if hist != "" && len(v.Histograms) == 0 {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "no such histogram that selects its groups (group_by without groups; see /api/layout)"})
		return
	}
	w.Header().Set("Cache-Control", "no-cache")
	writeJSON(w, http.StatusOK, v)
}

// selectionStatus is the part of a status message /api/selections and the
// metrics read.
type selectionStatus struct {
	Status      string             `json:"status"`
	Histogram   string             `json:"histogram"`
	WindowStart string             `json:"window_start"`
	WindowEnd   string             `json:"window_end"`
	Message     string             `json:"message"`
	Groups      []string           `json:"groups"`
	Selection   *release.Selection `json:"selection"`
}

func (s *Server) histogramSelections(name string, limit int) HistogramSelections {
	out := HistogramSelections{Name: name, Windows: []SelectionWindow{}}
	if s.plannedSelection != nil {
		out.Selection = newSelectionView(*s.plannedSelection)
	}
	newest := true
	for _, raw := range s.store.Statuses(name, limit) {
		var st selectionStatus
		if json.Unmarshal(raw, &st) != nil {
			continue
		}
		sw := SelectionWindow{WindowStart: st.WindowStart, WindowEnd: st.WindowEnd, Status: st.Status, Groups: []string{}}
		switch st.Status {
		case release.StatusGroupsSelected:
			sw.Groups = append(sw.Groups, st.Groups...)
			sw.Selected = len(sw.Groups)
			sw.Text = fmt.Sprintf("%d groups selected: %s", sw.Selected, strings.Join(sw.Groups, ", "))
			if sw.Selected == 1 {
				sw.Text = "1 group selected: " + sw.Groups[0]
			} else if sw.Selected == 0 {
				sw.Text = NoneSelectedText
			}
		case release.StatusSelectionWithheld:
			sw.Text = WithheldText
		default:
			sw.Text = "Not published: " + st.Message
		}
		if st.Selection != nil && newest {
			out.Selection, newest = newSelectionView(*st.Selection), false
		}
		out.Windows = append(out.Windows, sw)
	}
	return out
}

// Operator metrics of the selection. MetricGroupsSelected and
// MetricSelectionWithheld follow the published status messages (public:
// the output topic carries them); MetricSelectionKeys is private (the
// exact number of distinct group keys some user had in a window) and read
// from the stage at scrape time; MetricSelectionKeysLimit is public config.
const (
	MetricGroupsSelected     = "dpstage_groups_selected"
	MetricSelectionWithheld  = "dpstage_selection_withheld_total"
	MetricSelectionKeys      = "dpstage_selection_keys"
	MetricSelectionKeysLimit = "dpstage_selection_keys_limit"
)

// SelectionKeysSource is a Source whose histograms select their groups
// (*pipeline.Stage, with a selecting histogram): SelectionKeys returns, per
// selecting histogram's name, the group keys tracked in its last closed
// window (release.Keyed.Keys; sampled keys with at least one counted
// user) — absent before the histogram's first closed window. Private:
// served on the operator listener only.
type SelectionKeysSource interface {
	SelectionKeys() map[string]int
}

var (
	groupsSelectedDesc = prometheus.NewDesc(MetricGroupsSelected, "Groups released in the histogram's newest window whose selection status was published "+
		"(0 for a window withheld or refused by the budget). Public: the groups_selected status message names them.", []string{"histogram"}, nil)
	selectionWithheldDesc = prometheus.NewDesc(MetricSelectionWithheld, "Windows of the histogram whose selection was withheld (a selection_withheld status message was published: "+
		"the window's distinct group keys reached selection.max_keys_per_window by the noisy test); the recent units replayed after a restart are not counted again.", []string{"histogram"}, nil)
	selectionKeysDesc = prometheus.NewDesc(MetricSelectionKeys, "Group keys the histogram tracked in its last closed window (sampled keys with a counted user): "+
		"private, for capacity — compare with "+MetricSelectionKeysLimit+".", []string{"histogram"}, nil)
	selectionKeysLimitDesc = prometheus.NewDesc(MetricSelectionKeysLimit, "selection.max_keys_per_window, per selecting histogram (public config).", []string{"histogram"}, nil)
)

// selectionMetrics counts the selecting histograms' published status
// messages; it is the collector of the four metrics above.
type selectionMetrics struct {
	hists []string // the selecting histograms, in config order
	limit int      // selection.max_keys_per_window
	src   func() Source

	mu sync.Mutex // guards the maps
	// newest is the newest window start whose status set selected;
	// counted the newest withheld window counted.
	newest, counted map[string]time.Time
	selected        map[string]int
	withheld        map[string]int64
}

func newSelectionMetrics(cfg *config.Config, src func() Source) *selectionMetrics {
	m := &selectionMetrics{limit: cfg.Selection.MaxKeysPerWindow, src: src,
		newest: map[string]time.Time{}, counted: map[string]time.Time{}, selected: map[string]int{}, withheld: map[string]int64{}}
	for _, h := range cfg.Histograms {
		if h.Selects() {
			m.hists = append(m.hists, h.Name)
		}
	}
	return m
}

var statusKey = []byte(`"status":"`)

// observe reads the status messages of a published unit. A unit that was
// published before (u.Published: the recent units the node hands over again
// after a restart, node.replayRecent) sets the gauge but is not counted
// again, nor is a withheld window already counted (a copy republished).
func (m *selectionMetrics) observe(u *ledger.Unit) {
	if len(m.hists) == 0 {
		return
	}
	for _, msg := range u.Messages {
		if !bytes.Contains(msg.Value, statusKey) {
			continue // a release: the status message of its window says it all
		}
		var st selectionStatus
		if json.Unmarshal(msg.Value, &st) != nil {
			continue
		}
		ws, err := time.Parse(time.RFC3339Nano, st.WindowStart)
		if err != nil || !m.selects(st.Histogram) {
			continue
		}
		m.mu.Lock()
		if old, ok := m.newest[st.Histogram]; !ok || !ws.Before(old) {
			m.newest[st.Histogram] = ws
			m.selected[st.Histogram] = len(st.Groups) // 0 unless groups_selected
		}
		if old, ok := m.counted[st.Histogram]; st.Status == release.StatusSelectionWithheld && !u.Published && (!ok || ws.After(old)) {
			m.withheld[st.Histogram]++
			m.counted[st.Histogram] = ws
		}
		m.mu.Unlock()
	}
}

func (m *selectionMetrics) selects(h string) bool {
	for _, n := range m.hists {
		if n == h {
			return true
		}
	}
	return false
}

func (m *selectionMetrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{groupsSelectedDesc, selectionWithheldDesc, selectionKeysDesc, selectionKeysLimitDesc} {
		ch <- d
	}
}

func (m *selectionMetrics) Collect(ch chan<- prometheus.Metric) {
	if len(m.hists) == 0 {
		return
	}
	var keys map[string]int
	if ks, ok := m.src().(SelectionKeysSource); ok {
		keys = ks.SelectionKeys()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, h := range m.hists {
		ch <- prometheus.MustNewConstMetric(selectionWithheldDesc, prometheus.CounterValue, float64(m.withheld[h]), h)
		ch <- prometheus.MustNewConstMetric(selectionKeysLimitDesc, prometheus.GaugeValue, float64(m.limit), h)
		if _, ok := m.newest[h]; ok {
			ch <- prometheus.MustNewConstMetric(groupsSelectedDesc, prometheus.GaugeValue, float64(m.selected[h]), h)
		}
		if n, ok := keys[h]; ok {
			ch <- prometheus.MustNewConstMetric(selectionKeysDesc, prometheus.GaugeValue, float64(n), h)
		}
	}
}
