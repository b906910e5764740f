package config

import "time"

// Duration is a time.Duration written in YAML as a Go duration string
// ("1m", "5s", "24h").
type Duration time.Duration

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }
