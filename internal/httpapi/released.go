package httpapi

import (
	"encoding/json"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/release"
)

// The released values as metrics, for Grafana: the newest release of each
// declared (histogram, group) — its shares with their intervals and its
// private total with its interval — read from the release store at scrape
// time. They are public (the output topic carries them), so they add
// nothing private to the operator listener; a dashboard built on them
// plots exactly what the consumers of the output topic see.
const (
	MetricReleaseShare = "dpstage_release_share"
	MetricReleaseTotal = "dpstage_release_total"
)

var (
	releaseShareDesc = prometheus.NewDesc(MetricReleaseShare,
		"The newest release's share of each bin (value=\"estimate\") and its interval's ends (value=\"low\", \"high\"; level in the release): public, as published.",
		[]string{"histogram", "group", "bin", "value"}, nil)
	releaseTotalDesc = prometheus.NewDesc(MetricReleaseTotal,
		"The newest release's private total of counted events (users for an average histogram), value=\"estimate\", \"low\", \"high\": public, as published.",
		[]string{"histogram", "group", "value"}, nil)
)

// releasedCollector reads the store's newest release of every declared
// (histogram, group).
type releasedCollector struct {
	store *Store
	keys  [][2]string // (histogram, group), in config order
}

func newReleasedCollector(store *Store, cfg *config.Config) *releasedCollector {
	c := &releasedCollector{store: store}
	for _, h := range cfg.Histograms {
		for _, g := range h.GroupNames() {
			c.keys = append(c.keys, [2]string{h.Name, g})
		}
	}
	return c
}

func (c *releasedCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- releaseShareDesc
	ch <- releaseTotalDesc
}

func (c *releasedCollector) Collect(ch chan<- prometheus.Metric) {
	for _, k := range c.keys {
		msgs, _ := c.store.Query(k[0], k[1], 1)
		if len(msgs) == 0 {
			continue
		}
		var r release.Release
		if err := json.Unmarshal(msgs[0], &r); err != nil || len(r.Probabilities) != len(r.Bins) {
			continue
		}
		g := func(d *prometheus.Desc, v float64, labels ...string) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
		}
		for i, bin := range r.Bins {
			g(releaseShareDesc, r.Probabilities[i], k[0], k[1], bin, "estimate")
			if iv := r.Intervals; iv != nil && i < len(iv.Low) && i < len(iv.High) {
				g(releaseShareDesc, iv.Low[i], k[0], k[1], bin, "low")
				g(releaseShareDesc, iv.High[i], k[0], k[1], bin, "high")
			}
		}
		if t := r.Total; t != nil {
			g(releaseTotalDesc, t.Estimate, k[0], k[1], "estimate")
			g(releaseTotalDesc, t.Low, k[0], k[1], "low")
			g(releaseTotalDesc, t.High, k[0], k[1], "high")
		}
	}
}
