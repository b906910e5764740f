package config

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
)

// CountingFingerprint identifies what a bounded count means: every setting
// that decides which events count, how each user's contribution is bounded
// and into which (histogram, group, bin) it goes — events.*, window.*,
// histograms, contribution.*, the input topic and
// kafka.distributed.partitioner. Two configs with the same fingerprint
// produce the same bounded counts from the same events.
//
// The distributed mode stamps it on every partial: the releaser merges
// only partials made under its own counting config, since its noise is
// calibrated to its own bounds (a bounder still running an older config
// during a rolling change could have looser ones).
func (c *Config) CountingFingerprint() string {
	v := struct {
		Input        string
		Partitioner  string
		Events       Events
		Window       Window
		Histograms   []Histogram
		Contribution Contribution
	}{c.Kafka.InputTopic, c.Kafka.Distributed.Partitioner, c.Events, c.Window, c.Histograms, c.Contribution}
	b, err := json.Marshal(&v)
	if err != nil {
		panic("config: counting fingerprint: " + err.Error()) // plain data: cannot fail
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}
