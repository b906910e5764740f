package config

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

func TestFullConfig(t *testing.T) {
	dir := t.TempDir()
	writeTLSFiles(t, dir)
	data, err := os.ReadFile("testdata/full.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := Parse(data, envOf(map[string]string{"TLS_DIR": dir, "KAFKA_PASSWORD": "pw-from-env", "HTTP_TOKEN": "token-from-env", "OPERATOR_TOKEN": "operator-token-from-env"}))
	if err != nil {
		t.Fatal(err)
	}
	want := Config{
		Kafka: Kafka{
			Brokers:          []string{"kafka-1.internal:9093", "kafka-2.internal:9093"},
			GroupID:          "dp-stage-prod",
			InputTopic:       "page-views",
			OutputTopic:      "private-page-views",
			DeadLetterTopic:  "page-views-dlq",
			InputPartitions:  12,
			EmbeddedPort:     19093,
			SessionTimeout:   Duration(15 * time.Second),
			RebalanceTimeout: Duration(6 * time.Second),
			TLS: TLS{
				Enabled:    true,
				CAFile:     dir + "/ca.pem",
				CertFile:   dir + "/client.pem",
				KeyFile:    dir + "/client-key.pem",
				ServerName: "kafka.internal",
			},
			SASL:        SASL{Mechanism: SASLScramSHA512, Username: "dp-stage", Password: "pw-from-env"},
			Distributed: Distributed{InternalTopicPrefix: "dp-stage-internal.", Partitioner: PartitionerFNV1a, ReplicationFactor: 2, TransactionTimeout: Duration(30 * time.Second), PartitionChangeGrace: Duration(10 * time.Minute), PartialsFormat: PartialsJSON},
		},
		Events: Events{Format: "json", TimeField: "event_time", UserField: "account_id", MaxMessageBytes: 131072, MaxFuture: Duration(2 * time.Hour),
			SchemaRegistry: SchemaRegistry{Timeout: Duration(10 * time.Second)}, SchemaFiles: []SchemaFile{{ID: 1, File: dir + "/ca.pem"}}},
		Window: Window{
			Size:                 Duration(5 * time.Minute),
			Watermark:            WatermarkArrival,
			AllowedLateness:      Duration(30 * time.Second),
			IdlePartitionTimeout: Duration(time.Minute), Start: "2026-01-01T00:00:00Z",
			ClockSkewMargin: Duration(3 * time.Second), RecordTimes: RecordTimesBroker,
		},
		Histograms: []Histogram{
			{Name: "pages", Field: "page", Bins: []string{"home", "search", "cart", "checkout", "other"},
				OverflowBin: "other", GroupBy: "country", Groups: []string{"US", "DE", "FR"}, Kind: "count"},
			{Name: "devices", Field: "device", Bins: []string{"mobile", "desktop", "tablet"}, Kind: "count", Window: Duration(time.Hour)},
			{Name: "interests", Kind: "average", Field: "interest_vector", Bins: []string{"news", "sport", "music"},
				Average: Average{Users: 1000, K: 200, Eta: 0.02, Delta: 1e-9}},
		},
		Contribution: Contribution{MaxEventsPerUser: 3, MaxGroupsPerUser: 2, MaxTrackedUsers: 500000, BlindWarningShare: 0.4},
		Privacy: Privacy{
			Mechanism: "dirichlet", Calibration: "diffuse", Neighbour: "add_remove", Order: 4.5, RDPEpsilon: 0.05,
			Budget:                   Budget{Epsilon: 2.5, Delta: 1e-8, Period: Duration(168 * time.Hour)},
			ExpectedUsers:            500000,
			ExpectedEventsPerRelease: 20000,
			ExpectedWindowsPerUser:   30,
			TotalShare:               0.2,
		},
		State:     State{Dir: "/var/lib/dp-stage", AllowFreshLedger: true, Retain: Duration(720 * time.Hour), Ledger: LedgerBolt, LedgerTopic: "dp-stage-ledger"},
		Log:       Log{Format: "console", Level: "debug"},
		Generator: Generator{Enabled: true, Users: 1000, EventsPerSecond: 50, TimeScale: 60, UserLifetime: Duration(3 * time.Minute)},
		HTTP: HTTP{Address: "0.0.0.0:9090", AllowRemote: true, BearerToken: "token-from-env",
			OperatorAddress: "0.0.0.0:9091", OperatorAllowRemote: true, OperatorToken: "operator-token-from-env"},
		Output:    Output{ArrowDir: "/var/lib/dp-stage/arrow", IntervalLevel: 0.9},
		Selection: Selection{EpsilonShare: 0.3, DeltaShare: 0.4, MaxKeysPerWindow: 500000, KeySampleRate: 0.5},
	}
	got := *cfg
	got.meta = nil
	if !reflect.DeepEqual(got, want) {
		t.Errorf("full.yaml decoded to\n%#v\nwant\n%#v", plainConfig(got), plainConfig(want))
	}
	if g := cfg.Histograms[0].GroupNames(); !slices.Equal(g, []string{"US", "DE", "FR"}) {
		t.Errorf("GroupNames = %v", g)
	}
	if g := cfg.Histograms[1].GroupNames(); !slices.Equal(g, []string{"*"}) {
		t.Errorf("GroupNames without group_by = %v", g)
	}
	tc, err := cfg.Kafka.TLS.ClientConfig()
	if err != nil || tc == nil || tc.RootCAs == nil || len(tc.Certificates) != 1 || tc.ServerName != "kafka.internal" {
		t.Errorf("ClientConfig = %v, %v", tc, err)
	}

	// Every key of the Config tree appears in full.yaml.
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	present := map[string]bool{}
	collectKeys(doc.Content[0], "", present)
	for _, key := range allKeys(reflect.TypeOf(Config{}), "") {
		if !present[key] {
			t.Errorf("testdata/full.yaml lacks key %s", key)
		}
	}
}

// allKeys lists the YAML paths of every key of t, with [] for list items.
func allKeys(t reflect.Type, prefix string) []string {
	var out []string
	fields, names := structFields(t)
	for _, name := range names {
		ft := t.Field(fields[name].index).Type
		p := join(prefix, name)
		out = append(out, p)
		if ft.Kind() == reflect.Struct && ft != durationType {
			out = append(out, allKeys(ft, p)...)
		}
		if ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct {
			out = append(out, allKeys(ft.Elem(), p+"[]")...)
		}
	}
	return out
}

func collectKeys(n *yaml.Node, prefix string, out map[string]bool) {
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			p := join(prefix, n.Content[i].Value)
			out[p] = true
			collectKeys(n.Content[i+1], p, out)
		}
	case yaml.SequenceNode:
		for _, c := range n.Content {
			collectKeys(c, prefix+"[]", out)
		}
	}
}

// With privacy.expected_events_per_release the Dirichlet mechanism's
// default calibration is optimal; an explicit one is kept.
// TestMaxWindowsPerUserDefaultsTheCapOff: with the cross-window bound an
// absent max_tracked_users is 0 (no cap), not the default cap; without it
// the default cap stays.
func TestMaxWindowsPerUserDefaultsTheCapOff(t *testing.T) {
	for _, tc := range []struct {
		extra string
		want  int
	}{
		{"", DefaultMaxTrackedUsers},
		{"contribution:\n  max_windows_per_user: 5\n", 0},
		{"contribution:\n  max_windows_per_user: 0\n", DefaultMaxTrackedUsers},
	} {
		cfg := mustParse(t, minimal+tc.extra, nil)
		if cfg.Contribution.MaxTrackedUsers != tc.want {
			t.Errorf("%q: max_tracked_users %d, want %d", tc.extra, cfg.Contribution.MaxTrackedUsers, tc.want)
		}
	}
}

func TestDefaultCalibrationOptimal(t *testing.T) {
	for _, tc := range []struct{ extra, want string }{
		{"", "concentrated"},
		{"\n  expected_events_per_release: 10000", "optimal"},
		{"\n  expected_events_per_release: 10000\n  calibration: exact", "exact"},
	} {
		y := strings.Replace(minimal, "privacy:", "privacy:"+tc.extra, 1)
		cfg := mustParse(t, y, nil)
		if cfg.Privacy.Calibration != tc.want {
			t.Errorf("%q: calibration %q, want %q", tc.extra, cfg.Privacy.Calibration, tc.want)
		}
	}
}

func TestDefaults(t *testing.T) {
	cfg := mustParse(t, minimal, nil)
	want := Config{
		Kafka:  Kafka{GroupID: "dp-stage", InputTopic: "events", OutputTopic: "private-histograms", InputPartitions: 4, SessionTimeout: DefaultSessionTimeout},
		Events: Events{Format: "json", TimeField: "ts", UserField: "user_id", MaxMessageBytes: 65536, MaxFuture: DefaultMaxFuture},
		Window: Window{Size: Duration(time.Minute), Watermark: WatermarkArrival, AllowedLateness: Duration(5 * time.Second),
			IdlePartitionTimeout: Duration(10 * time.Second), ClockSkewMargin: DefaultClockSkewMargin, RecordTimes: RecordTimesBroker},
		Histograms:   []Histogram{{Name: "pages", Field: "page", Bins: []string{"home", "other"}, Kind: "count"}},
		Contribution: Contribution{MaxEventsPerUser: 1, MaxGroupsPerUser: 1, MaxTrackedUsers: 2_000_000, BlindWarningShare: 0.5},
		Privacy: Privacy{Mechanism: "dirichlet", Calibration: "concentrated", Neighbour: "replace", Order: 2,
			Budget: Budget{Epsilon: 1, Delta: 1e-6, Period: Duration(24 * time.Hour)}, TotalShare: DefaultTotalShare},
		State:     State{Dir: "./stage-state", Retain: DefaultRetain, Ledger: LedgerBolt},
		Log:       Log{Format: "json", Level: "info"},
		Generator: Generator{Users: 300, EventsPerSecond: 200, TimeScale: 1},
		HTTP:      HTTP{Address: "127.0.0.1:8080", OperatorAddress: "127.0.0.1:8081"},
		Output:    Output{IntervalLevel: DefaultIntervalLevel},
		Selection: Selection{EpsilonShare: DefaultSelectionEpsilonShare, DeltaShare: DefaultSelectionDeltaShare, MaxKeysPerWindow: DefaultMaxKeysPerWindow, KeySampleRate: DefaultKeySampleRate},
	}
	got := *cfg
	got.meta = nil
	if !reflect.DeepEqual(got, want) {
		t.Errorf("defaults:\n%#v\nwant\n%#v", plainConfig(got), plainConfig(want))
	}
	// A Config built in Go gets the same defaults.
	var built Config
	built.Histograms = want.Histograms
	built.Privacy.Budget.Epsilon = 1
	built.ApplyDefaults()
	if !reflect.DeepEqual(built, want) {
		t.Errorf("ApplyDefaults on a Go Config:\n%#v\nwant\n%#v", plainConfig(built), plainConfig(want))
	}
	if err := built.Validate(); err != nil {
		t.Error(err)
	}
	// ApplyDefaults is idempotent, and keeps explicit zeros.
	cfg = mustParse(t, minimal+"window:\n  allowed_lateness: 0s\n", nil)
	cfg.ApplyDefaults()
	if cfg.Window.AllowedLateness != 0 {
		t.Errorf("explicit allowed_lateness 0s became %v", cfg.Window.AllowedLateness)
	}
	// No calibration is invented for the noise-adding mechanisms.
	cfg = mustParse(t, minimal+"  mechanism: gaussian\n", nil)
	if cfg.Privacy.Calibration != "" {
		t.Errorf("gaussian got calibration %q", cfg.Privacy.Calibration)
	}
	// Null and absent are the same.
	cfg = mustParse(t, minimal+"kafka:\n  group_id:\n  input_partitions: ~\nwindow:\n", nil)
	if cfg.Kafka.GroupID != "dp-stage" || cfg.Kafka.InputPartitions != 4 {
		t.Errorf("null values did not get defaults: %+v", cfg.Kafka)
	}
}

func TestExplicitZeroIsNotDefaulted(t *testing.T) {
	for _, tc := range []struct{ yml, path, frag string }{
		{"contribution:\n  max_events_per_user: 0\n", "contribution.max_events_per_user", "at least 1"},
		{"window:\n  size: 0s\n", "window.size", "greater than 0"},
		{"kafka:\n  group_id: \"\"\n", "kafka.group_id", "must not be empty"},
		{"events:\n  time_field: ''\n", "events.time_field", "must not be empty"},
		{"privacy:\n  order: 0\n", "privacy.order", "greater than 1"},
		{"privacy:\n  budget:\n    delta: 0\n", "privacy.budget.delta", "between 0 and 1"},
		{"contribution:\n  blind_warning_share: 0\n", "contribution.blind_warning_share", "must be a share in (0, 1]"},
	} {
		// Merge the override into minimal by replacing its sections.
		yml := mergeYAML(t, minimal, tc.yml)
		_, err := Parse([]byte(yml), nil)
		if _, ok := findProblem(problems(t, err), tc.path, tc.frag); !ok {
			t.Errorf("%q: want %s: ...%s..., got %v", tc.yml, tc.path, tc.frag, err)
		}
	}
}

// mergeYAML deep-merges the mappings of override into base.
func mergeYAML(t *testing.T, base, override string) string {
	t.Helper()
	var b, o map[string]any
	if err := yaml.Unmarshal([]byte(base), &b); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal([]byte(override), &o); err != nil {
		t.Fatal(err)
	}
	var merge func(dst, src map[string]any)
	merge = func(dst, src map[string]any) {
		for k, v := range src {
			sm, ok1 := v.(map[string]any)
			dm, ok2 := dst[k].(map[string]any)
			if ok1 && ok2 {
				merge(dm, sm)
			} else {
				dst[k] = v
			}
		}
	}
	merge(b, o)
	out, err := yaml.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

func TestDecodeProblems(t *testing.T) {
	for _, tc := range []struct {
		name, yml, path string
		line            int
		frag            string
	}{
		{"unknown top-level key", "histogram:\n  - name: x\n", "histogram", 1, `unknown key "histogram" (did you mean "histograms"?)`},
		{"misspelled nested key", "kafka:\n  brokers: []\n  grup_id: x\n", "kafka.grup_id", 3, `unknown key "grup_id" (did you mean "group_id"?)`},
		{"unknown key without suggestion", "window:\n  frobnicate: 1\n", "window.frobnicate", 2, `unknown key "frobnicate" (known keys: size, watermark, allowed_lateness, idle_partition_timeout, start, close_after, clock_skew_margin, record_times)`},
		{"unknown key in a histogram", "histograms:\n  - name: a\n    field: f\n    bins: [a, b]\n    overflow: b\n", "histograms[0].overflow", 5, `unknown key "overflow" (did you mean "overflow_bin"?)`},
		{"unknown key in tls", "kafka:\n  tls:\n    ca: x\n", "kafka.tls.ca", 3, `unknown key "ca"`},
		{"string for int", "kafka:\n  input_partitions: four\n", "kafka.input_partitions", 2, `"four": expected a whole number`},
		{"quoted number for int", "kafka:\n  input_partitions: \"4\"\n", "kafka.input_partitions", 2, `expected a whole number`},
		{"fraction for int", "contribution:\n  max_events_per_user: 1.5\n", "contribution.max_events_per_user", 2, "expected a whole number"},
		{"int overflow", "contribution:\n  max_tracked_users: 99999999999999999999\n", "contribution.max_tracked_users", 2, "out of range"},
		{"string for float", "privacy:\n  order: two\n", "privacy.order", 2, "expected a number"},
		{"string for bool", "generator:\n  enabled: yes\n", "generator.enabled", 2, "expected true or false"},
		{"list for string", "kafka:\n  group_id: [a, b]\n", "kafka.group_id", 2, "expected a string, got a list"},
		{"mapping for list", "kafka:\n  brokers: {a: b}\n", "kafka.brokers", 2, "expected a list, got a mapping"},
		{"scalar for list", "kafka:\n  brokers: localhost:9092\n", "kafka.brokers", 2, "expected a list, got a string"},
		{"scalar for section", "window: 1m\n", "window", 1, "expected a mapping of keys, got a string"},
		{"mapping for bins item", "histograms:\n  - bins:\n      - {a: 1}\n", "histograms[0].bins[0]", 3, "expected a string, got a mapping"},
		{"bad duration", "window:\n  size: 1 minute\n", "window.size", 2, `"1 minute": expected a Go duration`},
		{"duration without unit", "window:\n  size: 60\n", "window.size", 2, `"60": expected a Go duration`},
		{"days are not a unit", "privacy:\n  budget:\n    period: 1d\n", "privacy.budget.period", 3, "expected a Go duration such as 1m, 5s, 1h30m or 24h"},
		{"negative duration", "window:\n  allowed_lateness: -5s\n", "window.allowed_lateness", 2, `"-5s": must not be negative`},
		{"duplicate key", "kafka:\n  group_id: a\n  group_id: b\n", "kafka.group_id", 3, `duplicate key "group_id" (first at line 2)`},
		{"non-scalar key", "kafka:\n  ? [a]\n  : b\n", "kafka", 2, "mapping keys must be plain strings"},
		{"root not a mapping", "- a\n- b\n", "", 1, "expected a mapping of config sections"},
		{"syntax error", "kafka:\n  brokers: [a\n", "", 0, "yaml syntax"},
		{"bad indentation", "kafka:\n  group_id: a\n   input_topic: b\n", "", 3, "yaml syntax"},
		{"two documents", minimal + "---\nkafka: {}\n", "", 10, "a second YAML document starts here"},
		{"literal password", "kafka:\n  sasl:\n    mechanism: plain\n    username: u\n    password: hunter2\n", "kafka.sasl.password", 5, "a literal secret in the file is not allowed"},
		{"password with default", "kafka:\n  sasl:\n    password: ${PW:-hunter2}\n", "kafka.sasl.password", 3, "a literal secret"},
		{"password with literal text", "kafka:\n  sasl:\n    password: x${PW}\n", "kafka.sasl.password", 3, "a literal secret"},
		{"bad merge", "kafka:\n  <<: 5\n", "kafka", 2, "merge key (<<) needs a mapping"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yml), envOf(map[string]string{"PW": "pw"}))
			probs := problems(t, err)
			p, ok := findProblem(probs, tc.path, tc.frag)
			if !ok {
				t.Fatalf("want %s: line %d: ...%s..., got\n%v", tc.path, tc.line, tc.frag, err)
			}
			if tc.line != 0 && p.Line != tc.line {
				t.Errorf("line = %d, want %d (%v)", p.Line, tc.line, p)
			}
			if tc.line != 0 && !strings.Contains(err.Error(), fmt.Sprintf("line %d: ", tc.line)) {
				t.Errorf("error text lacks the line: %v", err)
			}
		})
	}
}

func TestAllDecodeProblemsAtOnce(t *testing.T) {
	_, err := Parse([]byte("kafka:\n  grup_id: a\n  input_partitions: x\nwindow:\n  size: 1 minute\nloggs: {}\n"), nil)
	probs := problems(t, err)
	if len(probs) != 4 {
		t.Fatalf("want 4 problems, got %v", err)
	}
	for i, line := range []int{2, 3, 5, 6} {
		if probs[i].Line != line {
			t.Errorf("problem %d at line %d, want %d: %v", i, probs[i].Line, line, probs[i])
		}
	}
}

func TestAnchorsAndMerge(t *testing.T) {
	yml := `
x-common: &common
  field: page
  bins: &bins [home, search, other]
  overflow_bin: other
histograms:
  - <<: *common
    name: pages
  - <<: *common
    name: pages-by-country
    group_by: country
    groups: [US, DE]
  - name: other
    field: x
    bins: *bins
privacy:
  budget:
    epsilon: 1
`
	cfg := mustParse(t, yml, nil)
	if len(cfg.Histograms) != 3 {
		t.Fatalf("histograms: %+v", cfg.Histograms)
	}
	for _, h := range cfg.Histograms {
		if !slices.Equal(h.Bins, []string{"home", "search", "other"}) {
			t.Errorf("%s bins = %v", h.Name, h.Bins)
		}
	}
	if cfg.Histograms[1].Field != "page" || cfg.Histograms[1].GroupBy != "country" || cfg.Histograms[2].OverflowBin != "" {
		t.Errorf("merge: %+v", cfg.Histograms)
	}
	// An unknown key inside a merged mapping is still reported.
	_, err := Parse([]byte("x-base: &b\n  feild: page\nhistograms:\n  - <<: *b\n    name: a\n"), nil)
	if _, ok := findProblem(problems(t, err), "histograms[0].feild", `did you mean "field"`); !ok {
		t.Errorf("got %v", err)
	}
	// x- keys are only allowed at the top.
	_, err = Parse([]byte("kafka:\n  x-note: hi\n"), nil)
	if _, ok := findProblem(problems(t, err), "kafka.x-note", "unknown key"); !ok {
		t.Errorf("got %v", err)
	}
}

func TestAliasBombIsCheap(t *testing.T) {
	var b strings.Builder
	b.WriteString("x-a: &a [home, other, home, other, home, other, home, other, home, other]\n")
	prev := "a"
	for i := 0; i < 9; i++ {
		name := fmt.Sprintf("l%d", i)
		fmt.Fprintf(&b, "x-%s: &%s [*%s, *%s, *%s, *%s, *%s, *%s, *%s, *%s, *%s, *%s]\n", name, name, prev, prev, prev, prev, prev, prev, prev, prev, prev, prev)
		prev = name
	}
	fmt.Fprintf(&b, "histograms: *%s\n", prev)
	start := time.Now()
	_, err := Parse([]byte(b.String()), nil)
	if err == nil {
		t.Fatal("want an error")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("took %v", d)
	}
	if len(err.Error()) > 1<<20 {
		t.Errorf("error of %d bytes", len(err.Error()))
	}
}

func TestEmptyDocument(t *testing.T) {
	for _, yml := range []string{"", "# only a comment\n", "~\n", "---\n"} {
		_, err := Parse([]byte(yml), nil)
		probs := problems(t, err)
		if _, ok := findProblem(probs, "histograms", "at least one histogram"); !ok {
			t.Errorf("%q: %v", yml, err)
		}
		if _, ok := findProblem(probs, "privacy.budget.epsilon", "required"); !ok {
			t.Errorf("%q: %v", yml, err)
		}
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "stage.yaml")
	if err := os.WriteFile(path, []byte(minimal+"kafka:\n  group_id: ${DP_STAGE_TEST_GROUP:-from-default}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("DP_STAGE_TEST_GROUP", "from-env")
	cfg, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Kafka.GroupID != "from-env" {
		t.Errorf("group_id = %q", cfg.Kafka.GroupID)
	}
	if _, err := Load(filepath.Join(dir, "missing.yaml")); err == nil || !strings.Contains(err.Error(), "read config") {
		t.Errorf("missing file: %v", err)
	}
	big := filepath.Join(dir, "big.yaml")
	if err := os.WriteFile(big, []byte(strings.Repeat("#\n", MaxFileBytes/2+1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(big); err == nil || !strings.Contains(err.Error(), "file larger than") {
		t.Errorf("big file: %v", err)
	}
}

func TestStringAndMarshalRoundTrip(t *testing.T) {
	cfg := mustParse(t, minimal, nil)
	s := cfg.String()
	back, err := Parse([]byte(s), nil)
	if err != nil {
		t.Fatalf("String() output does not parse: %v\n%s", err, s)
	}
	if s2 := back.String(); s2 != s {
		t.Errorf("round trip changed the config:\n%s\nthen\n%s", s, s2)
	}
}
