package config

import "testing"

// TestSelectingRefusesJSONPartials (issue 30): JSON partials carry no
// group keys, so a selecting histogram (group_by without groups) in the
// distributed mode refuses partials_format json, saying what to change;
// arrow, or the groups listed, pass.
func TestSelectingRefusesJSONPartials(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(c *Config)
		bad    bool
	}{
		{"json and selecting", func(c *Config) {
			dist(c)
			c.Kafka.Distributed.PartialsFormat = PartialsJSON
			c.Histograms[1].Groups = nil
		}, true},
		{"arrow and selecting", func(c *Config) {
			dist(c)
			c.Kafka.Distributed.PartialsFormat = PartialsArrow
			c.Histograms[1].Groups = nil
		}, false},
		{"json and listed groups", func(c *Config) { dist(c); c.Kafka.Distributed.PartialsFormat = PartialsJSON }, false},
		{"json, selecting, not distributed", func(c *Config) { c.Kafka.Distributed.PartialsFormat = PartialsJSON; c.Histograms[1].Groups = nil }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := mustParse(t, base, nil)
			tc.mutate(c)
			err := c.Validate()
			if !tc.bad {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil {
				t.Fatal("validated")
			}
			if _, ok := findProblem(problems(t, err), "kafka.distributed.partials_format", "set partials_format: arrow"); !ok {
				t.Fatalf("want kafka.distributed.partials_format: ...set partials_format: arrow..., got\n%v", err)
			}
		})
	}
}
