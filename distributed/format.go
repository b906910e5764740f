package distributed

import "github.com/dpstage/stage/config"

// The counting fingerprints of the partials (issue 28 item 4): since
// issue 28 the fingerprint covers privacy.budget.period
// (config.Config.CountingFingerprint), and the partials are Arrow
// (package partial). With kafka.distributed.partials_format json — the
// first roll of an upgrade from an older version — a bounder writes its
// partials as that version did: JSON, stamped with the fingerprint it
// computed (config.Config.PreviousCountingFingerprint), so that the older
// releasers still running read and merge them. A releaser of this version
// merges the partials of its config stamped with either, and with the
// fingerprint of the versions before issue 22.

// stampConfig is the counting fingerprint the bounders stamp on their
// partials.
func (s *stage) stampConfig() string {
	if s.Cfg.Kafka.Distributed.PartialsFormat == config.PartialsJSON {
		return s.Cfg.PreviousCountingFingerprint()
	}
	return s.CountingConfig
}

// olderFingerprints are the fingerprints older versions computed for the
// releaser's config, whose partials it merges as its own
// (partial.Merger.AlsoMerge).
func (s *stage) olderFingerprints() []string {
	return []string{s.Cfg.PreviousCountingFingerprint(), s.Cfg.LegacyCountingFingerprint()}
}
