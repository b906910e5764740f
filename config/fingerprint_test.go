package config

import (
	"testing"
	"time"
)

// TestCountingFingerprint: the fingerprint changes with every setting that
// changes counts, and not with the operational knobs (issue 22 item 2: a
// rolling change of idle_partition_timeout, max_message_bytes or
// window.start left partitions out of windows).
func TestCountingFingerprint(t *testing.T) {
	base := func() *Config {
		c := &Config{}
		c.Kafka.InputTopic = "events"
		c.Kafka.Distributed.Partitioner = PartitionerMurmur2
		c.Events = Events{Format: "json", TimeField: "ts", UserField: "user_id", MaxMessageBytes: 65536, MaxFuture: Duration(time.Hour)}
		c.Window = Window{Size: Duration(time.Minute), Watermark: WatermarkArrival, AllowedLateness: Duration(5 * time.Second),
			IdlePartitionTimeout: Duration(10 * time.Second), ClockSkewMargin: Duration(2 * time.Second), RecordTimes: "broker"}
		c.Histograms = []Histogram{{Name: "pages", Field: "page", Bins: []string{"a", "b"}}}
		c.Contribution = Contribution{MaxEventsPerUser: 1, MaxGroupsPerUser: 1}
		c.Privacy.Budget.Period = Duration(24 * time.Hour)
		return c
	}
	ref := base().CountingFingerprint()
	cases := []struct {
		name   string
		change func(*Config)
		same   bool
	}{
		{"window.start", func(c *Config) { c.Window.Start = "2026-01-01T00:00:00Z" }, true},
		{"window.idle_partition_timeout", func(c *Config) { c.Window.IdlePartitionTimeout = Duration(time.Minute) }, true},
		{"window.clock_skew_margin", func(c *Config) { c.Window.ClockSkewMargin = Duration(time.Second) }, true},
		{"events.max_message_bytes", func(c *Config) { c.Events.MaxMessageBytes = 1 << 20 }, true},
		{"privacy (not counting)", func(c *Config) { c.Privacy.Order = 4 }, true},
		{"contribution.blind_warning_share (operator warning only)", func(c *Config) { c.Contribution.BlindWarningShare = 0.9 }, true},
		// A review of issue 29 item 3: a share changes the noise, not what
		// is counted (a rolling change of it left partitions out).
		{"histograms[].budget_share (noise only)", func(c *Config) { c.Histograms[0].BudgetShare = 0.7 }, true},
		{"window.size", func(c *Config) { c.Window.Size = Duration(2 * time.Minute) }, false},
		{"window.allowed_lateness", func(c *Config) { c.Window.AllowedLateness = Duration(time.Second) }, false},
		{"window.watermark", func(c *Config) { c.Window.Watermark = WatermarkEvent }, false},
		{"events.user_field", func(c *Config) { c.Events.UserField = "uid" }, false},
		{"events.max_future", func(c *Config) { c.Events.MaxFuture = Duration(time.Minute) }, false},
		{"histograms", func(c *Config) { c.Histograms[0].Bins = []string{"a", "c"} }, false},
		{"contribution", func(c *Config) { c.Contribution.MaxEventsPerUser = 2 }, false},
		{"histograms[].max_windows_per_user", func(c *Config) { c.Histograms[0].MaxWindowsPerUser = 3 }, false},
		{"input topic", func(c *Config) { c.Kafka.InputTopic = "other" }, false},
		{"partitioner", func(c *Config) { c.Kafka.Distributed.Partitioner = PartitionerFNV1a }, false},
		// Issue 28 item 4: the cross-window bound's periods.
		{"privacy.budget.period", func(c *Config) { c.Privacy.Budget.Period = Duration(2 * time.Hour) }, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := base()
			tc.change(c)
			if got := c.CountingFingerprint() == ref; got != tc.same {
				t.Errorf("fingerprint unchanged: %v, want %v", got, tc.same)
			}
		})
	}
	if base().LegacyCountingFingerprint() == ref || base().PreviousCountingFingerprint() == ref {
		t.Error("an older fingerprint equals the new one: the upgrade path is untested")
	}
	// The previous fingerprint is the one without the period: a period
	// change does not change it (which is why it is merged only as the
	// older versions' stamp).
	c := base()
	c.Privacy.Budget.Period = Duration(2 * time.Hour)
	if c.PreviousCountingFingerprint() != base().PreviousCountingFingerprint() {
		t.Error("the previous fingerprint depends on the period")
	}
}
