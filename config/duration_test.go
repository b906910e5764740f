package config

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

func TestDurationYAML(t *testing.T) {
	type doc struct {
		D Duration `yaml:"d"`
	}
	for _, tc := range []struct {
		in   string
		want time.Duration
	}{
		{"1m", time.Minute},
		{"5s", 5 * time.Second},
		{"24h", 24 * time.Hour},
		{"1h30m", 90 * time.Minute},
		{"250ms", 250 * time.Millisecond},
		{"0s", 0},
		{"0", 0},
		{"'10s'", 10 * time.Second},
	} {
		var d doc
		if err := yaml.Unmarshal([]byte("d: "+tc.in), &d); err != nil {
			t.Errorf("%s: %v", tc.in, err)
			continue
		}
		if d.D.D() != tc.want {
			t.Errorf("%s = %v, want %v", tc.in, d.D.D(), tc.want)
		}
	}
	for _, in := range []string{"-5s", "abc", "60", "1d", "1 minute", "[1m]", "{a: b}", "99999999999h"} {
		var d doc
		err := yaml.Unmarshal([]byte("\n\nd: "+in), &d)
		if err == nil {
			t.Errorf("%s: want an error", in)
			continue
		}
		if !strings.Contains(err.Error(), "line 3") {
			t.Errorf("%s: error without its line: %v", in, err)
		}
	}
	var d doc
	if err := yaml.Unmarshal([]byte("d: ~"), &d); err != nil || d.D != 0 {
		t.Errorf("null: %v, %v", d.D, err)
	}
}

func TestDurationFormat(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{time.Minute, "1m"},
		{24 * time.Hour, "24h"},
		{90 * time.Second, "1m30s"},
		{time.Hour + 30*time.Second, "1h0m30s"},
		{90 * time.Minute, "1h30m"},
		{5 * time.Second, "5s"},
		{1500 * time.Millisecond, "1.5s"},
		{0, "0s"},
	} {
		d := Duration(tc.d)
		if got := d.String(); got != tc.want {
			t.Errorf("String(%v) = %q, want %q", tc.d, got, tc.want)
		}
		out, err := yaml.Marshal(struct {
			D Duration `yaml:"d"`
		}{d})
		if err != nil || string(out) != "d: "+tc.want+"\n" {
			t.Errorf("MarshalYAML(%v) = %q, %v", tc.d, out, err)
		}
		back, err := ParseDuration(tc.want)
		if err != nil || back != d {
			t.Errorf("round trip of %q: %v, %v", tc.want, back, err)
		}
		js, err := json.Marshal(d)
		if err != nil || string(js) != `"`+tc.want+`"` {
			t.Errorf("json %v: %s, %v", tc.d, js, err)
		}
		var fromJSON Duration
		if err := json.Unmarshal(js, &fromJSON); err != nil || fromJSON != d {
			t.Errorf("json round trip of %s: %v, %v", js, fromJSON, err)
		}
	}
}
