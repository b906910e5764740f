package config

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
)

// CountingFingerprint identifies what a bounded count means: every setting
// that decides how a counted event is bounded and into which (histogram,
// group, bin, window) it goes — the noise's sensitivities and the meaning
// of a release — and the rule that decides whether an event is on time:
// events.* (but max_message_bytes), window.* (but start,
// idle_partition_timeout and clock_skew_margin), histograms,
// contribution.*, the input topic and kafka.distributed.partitioner — and
// privacy.budget.period, which decides the cross-window bound's periods
// (contribution.max_windows_per_user: a user's K windows are counted per
// period). Two configs with the same fingerprint produce the same bounded
// counts from the same events.
//
// The period is in it since issue 28: a bounder refuses to resume a
// partition whose progress says another period, but a progress record of
// an older version says none, and was taken on trust. With the period in
// the fingerprint, the partials of a bounder on another period are
// foreign to every releaser, whatever its progress said: never merged.
//
// The distributed mode stamps it on every partial: the releaser merges
// only partials made under its own counting config, since its noise is
// calibrated to its own bounds (a bounder still running an older config
// during a rolling change could have looser ones). So it leaves out the
// knobs that change no count, and whose rolling change would otherwise
// leave partitions out of windows for nothing (issue 22 item 2):
//
//   - window.start: read once, for the deployment's first window; the
//     release log's first window wins afterwards.
//   - window.clock_skew_margin: when a window closes, not which events
//     count (record time < end + lateness either way).
//   - window.idle_partition_timeout (watermark event): when a quiet
//     partition stops holding windows, i.e. when windows are released;
//     an event that comes after its window was released without its
//     partition is late, as under any timeout.
//   - events.max_message_bytes: which oversized messages are refused as
//     malformed input (dropped, counted, dead-lettered), not how an
//     accepted event counts or is bounded.
//
// Adding a field to one of these sections puts it in the fingerprint (the
// safe default); leave a new knob out here only with such an argument.
func (c *Config) CountingFingerprint() string {
	ev, win := c.countingSections()
	return fingerprint(c.Kafka.InputTopic, c.Kafka.Distributed.Partitioner, ev, win, c.Histograms, c.Contribution, c.Privacy.Budget.Period.D().Milliseconds())
}

// PreviousCountingFingerprint is CountingFingerprint as versions from
// issue 22 to issue 28 computed it: without privacy.budget.period. A
// releaser also merges the partials stamped with it (their bounders
// checked the period of the progress records that carry one), and a
// bounder stamps it with kafka.distributed.partials_format json (the first
// roll of an upgrade, whose older releasers know only it).
func (c *Config) PreviousCountingFingerprint() string {
	ev, win := c.countingSections()
	return fingerprint(c.Kafka.InputTopic, c.Kafka.Distributed.Partitioner, ev, win, c.Histograms, c.Contribution, 0)
}

// countingSections are events.* and window.* without the knobs that
// change no count (see CountingFingerprint).
func (c *Config) countingSections() (Events, Window) {
	ev, win := c.Events, c.Window
	ev.MaxMessageBytes = 0
	// Where the schemas are fetched from is not how an event counts: a
	// schema id names one immutable schema in a registry.
	ev.SchemaRegistry = SchemaRegistry{}
	win.Start, win.ClockSkewMargin, win.IdlePartitionTimeout = "", 0, 0
	return ev, win
}

// LegacyCountingFingerprint is CountingFingerprint as versions before
// issue 22 computed it (every events.* and window.* setting). A releaser
// also merges the partials stamped with it, so that upgrading replicas one
// at a time leaves no partition out of a window.
func (c *Config) LegacyCountingFingerprint() string {
	return fingerprint(c.Kafka.InputTopic, c.Kafka.Distributed.Partitioner, c.Events, c.Window, c.Histograms, c.Contribution, 0)
}

// fingerprint hashes the counting sections. periodMs is left out of the
// JSON when 0 (omitempty), so that the fingerprints of older versions,
// which had no period, come out as they computed them.
func fingerprint(input, partitioner string, ev Events, win Window, hs []Histogram, con Contribution, periodMs int64) string {
	// budget_share changes the noise, not what is counted: a rolling
	// change of a share must not make the other replicas' partials
	// foreign. Zeroed in a copy (0 is left out of the JSON, so
	// fingerprints without shares are unchanged).
	if hasShare(hs) {
		hs = append([]Histogram(nil), hs...)
		for i := range hs {
			hs[i].BudgetShare = 0
		}
	}
	v := struct {
		Input        string
		Partitioner  string
		Events       Events
		Window       Window
		Histograms   []Histogram
		Contribution Contribution
		PeriodMs     int64 `json:",omitempty"`
	}{input, partitioner, ev, win, hs, con, periodMs}
	b, err := json.Marshal(&v)
	if err != nil {
		panic("config: counting fingerprint: " + err.Error()) // plain data: cannot fail
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// hasShare reports whether some histogram sets budget_share.
func hasShare(hs []Histogram) bool {
	for _, h := range hs {
		if h.BudgetShare != 0 {
			return true
		}
	}
	return false
}
