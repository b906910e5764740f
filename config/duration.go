package config

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Duration is a time.Duration written in YAML as a Go duration string
// ("1m", "5s", "24h"). Negative durations are rejected.
type Duration time.Duration

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// String formats d like time.Duration.String without zero trailing units:
// "1m", "24h", "1m30s", "0s".
func (d Duration) String() string {
	s := time.Duration(d).String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

// MarshalYAML writes d as a duration string.
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

// MarshalText writes d as a duration string (JSON, logs).
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText parses a duration string (see [ParseDuration]).
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("invalid duration %q: %w", b, err)
	}
	*d = v
	return nil
}

// UnmarshalYAML parses a scalar duration string (see [ParseDuration]); a null
// leaves d unchanged. Errors name the line.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: expected a duration such as 1m, 5s or 24h, got %s", n.Line, kindName(n))
	}
	if n.ShortTag() == "!!null" {
		return nil
	}
	v, err := ParseDuration(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: invalid duration %q: %w", n.Line, n.Value, err)
	}
	*d = v
	return nil
}

var (
	errNegativeDuration = errors.New("must not be negative")
	errDurationSyntax   = errors.New("expected a Go duration such as 1m, 5s, 1h30m or 24h")
)

// ParseDuration parses a Go duration string ("1m", "5s", "24h", "1h30m",
// "0s") and rejects negative values. The error never repeats the input.
func ParseDuration(s string) (Duration, error) {
	v, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		return 0, errDurationSyntax
	}
	if v < 0 {
		return 0, errNegativeDuration
	}
	return Duration(v), nil
}
