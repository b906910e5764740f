package config

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

func TestInterpolation(t *testing.T) {
	env := map[string]string{
		"GROUP":   "team-a",
		"EMPTY":   "",
		"PARTS":   "8",
		"EPS":     "0.5",
		"ON":      "true",
		"SIZE":    "2m",
		"BROKERS": "a:9092, b:9092,,c:9092",
		"YAMLISH": "x\nkafka: {group_id: evil}\n- [",
		"NESTED":  "${GROUP}",
	}
	for _, tc := range []struct {
		name, yml string
		check     func(c *Config) bool
	}{
		{"whole value", "kafka:\n  group_id: ${GROUP}\n", func(c *Config) bool { return c.Kafka.GroupID == "team-a" }},
		{"inside text", "kafka:\n  group_id: pre-${GROUP}-post\n", func(c *Config) bool { return c.Kafka.GroupID == "pre-team-a-post" }},
		{"two references", "kafka:\n  group_id: ${GROUP}.${PARTS}\n", func(c *Config) bool { return c.Kafka.GroupID == "team-a.8" }},
		{"default unused", "kafka:\n  group_id: ${GROUP:-other}\n", func(c *Config) bool { return c.Kafka.GroupID == "team-a" }},
		{"default for unset", "kafka:\n  group_id: ${UNSET:-other}\n", func(c *Config) bool { return c.Kafka.GroupID == "other" }},
		{"default for empty", "kafka:\n  group_id: ${EMPTY:-other}\n", func(c *Config) bool { return c.Kafka.GroupID == "other" }},
		{"empty default is absent", "kafka:\n  group_id: ${UNSET:-}\n", func(c *Config) bool { return c.Kafka.GroupID == "dp-stage" }},
		{"set but empty is absent", "kafka:\n  group_id: ${EMPTY}\n", func(c *Config) bool { return c.Kafka.GroupID == "dp-stage" }},
		{"quoted", "kafka:\n  group_id: \"${GROUP}\"\n", func(c *Config) bool { return c.Kafka.GroupID == "team-a" }},
		{"int", "kafka:\n  input_partitions: ${PARTS}\n", func(c *Config) bool { return c.Kafka.InputPartitions == 8 }},
		{"quoted int", "kafka:\n  input_partitions: \"${PARTS}\"\n", func(c *Config) bool { return c.Kafka.InputPartitions == 8 }},
		{"int default", "kafka:\n  input_partitions: ${UNSET:-16}\n", func(c *Config) bool { return c.Kafka.InputPartitions == 16 }},
		{"float", "generator:\n  time_scale: ${EPS:-3}\n", func(c *Config) bool { return c.Generator.TimeScale == 0.5 }},
		{"bool", "generator:\n  enabled: ${ON}\n", func(c *Config) bool { return c.Generator.Enabled }},
		{"duration", "window:\n  size: ${SIZE}\n", func(c *Config) bool { return c.Window.Size.D().Minutes() == 2 }},
		{"list from one variable", "kafka:\n  brokers: ${BROKERS}\n", func(c *Config) bool {
			return slices.Equal(c.Kafka.Brokers, []string{"a:9092", "b:9092", "c:9092"})
		}},
		{"list items", "kafka:\n  brokers: [\"${UNSET:-x}:9092\"]\n", func(c *Config) bool { return slices.Equal(c.Kafka.Brokers, []string{"x:9092"}) }},
		{"escaped", "kafka:\n  group_id: $${GROUP}\n", func(c *Config) bool { return c.Kafka.GroupID == "${GROUP}" }},
		{"lone dollar", "kafka:\n  group_id: a$b$\n", func(c *Config) bool { return c.Kafka.GroupID == "a$b$" }},
		{"value is not interpolated again", "kafka:\n  group_id: ${NESTED}\n", func(c *Config) bool { return c.Kafka.GroupID == "${GROUP}" }},
		{"value is not parsed as YAML", "kafka:\n  group_id: ${YAMLISH}\n", func(c *Config) bool {
			return c.Kafka.GroupID == env["YAMLISH"] && c.Kafka.InputTopic == "events"
		}},
		{"keys are not interpolated", "x-${GROUP}: 1\n", func(c *Config) bool { return true }},
		{"aliased reference resolves once", "x-a: &g ${NESTED}\nkafka:\n  group_id: *g\nstate:\n  dir: *g\n", func(c *Config) bool {
			return c.Kafka.GroupID == "${GROUP}" && c.State.Dir == "${GROUP}"
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := mustParse(t, mergeYAMLText(tc.yml), env)
			if !tc.check(c) {
				t.Errorf("unexpected result:\n%s", fmt.Sprintf("%+v", plainConfig(*c)))
			}
		})
	}
}

// mergeYAMLText appends the required sections of minimal to yml (which must
// not contain them).
func mergeYAMLText(yml string) string { return yml + minimal }

func TestInterpolationProblems(t *testing.T) {
	for _, tc := range []struct{ name, yml, path, frag string }{
		{"unset", "kafka:\n  group_id: ${DP_UNSET}\n", "kafka.group_id", "environment variable DP_UNSET is not set"},
		{"unset in a list", "kafka:\n  brokers: [a:1, \"${DP_UNSET}:9092\"]\n", "kafka.brokers[1]", "environment variable DP_UNSET is not set"},
		{"unset in a histogram", "histograms:\n  - name: ${HNAME}\n", "histograms[0].name", "HNAME is not set"},
		{"unterminated", "kafka:\n  group_id: ${GROUP\n", "kafka.group_id", "unterminated ${"},
		{"empty name", "kafka:\n  group_id: ${}\n", "kafka.group_id", `invalid reference "${}"`},
		{"bad name", "kafka:\n  group_id: ${1ABC}\n", "kafka.group_id", "invalid reference"},
		{"other operator", "kafka:\n  group_id: ${A:?boom}\n", "kafka.group_id", "use ${NAME} or ${NAME:-default}"},
		{"nested default", "kafka:\n  group_id: ${A:-${B}}\n", "kafka.group_id", "nested reference"},
		{"not a number", "kafka:\n  input_partitions: ${WORD}\n", "kafka.input_partitions", "value of ${WORD}: expected a whole number"},
		{"not a duration", "window:\n  size: ${WORD}\n", "window.size", "value of ${WORD}: expected a Go duration"},
		{"not a bool", "generator:\n  enabled: ${WORD}\n", "generator.enabled", "value of ${WORD}: expected true or false"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yml), envOf(map[string]string{"WORD": "banana"}))
			p, ok := findProblem(problems(t, err), tc.path, tc.frag)
			if !ok {
				t.Fatalf("want %s: ...%s..., got\n%v", tc.path, tc.frag, err)
			}
			if p.Line == 0 {
				t.Errorf("no line: %v", p)
			}
			if strings.Contains(err.Error(), "banana") {
				t.Errorf("error shows the value: %v", err)
			}
		})
	}
}

func TestSecretPassword(t *testing.T) {
	yml := minimal + "kafka:\n  sasl:\n    mechanism: plain\n    username: stage\n    password: ${KAFKA_PASSWORD}\n"
	c := mustParse(t, yml, map[string]string{"KAFKA_PASSWORD": "p@ss: {w}\n- [d"})
	if c.Kafka.SASL.Password != "p@ss: {w}\n- [d" {
		t.Errorf("password = %q", c.Kafka.SASL.Password)
	}
	_, err := Parse([]byte(yml), nil)
	if _, ok := findProblem(problems(t, err), "kafka.sasl.password", "KAFKA_PASSWORD is not set"); !ok {
		t.Errorf("unset password: %v", err)
	}
	_, err = Parse([]byte(yml), envOf(map[string]string{"KAFKA_PASSWORD": ""}))
	if _, ok := findProblem(problems(t, err), "kafka.sasl.password", "must be set"); !ok {
		t.Errorf("empty password: %v", err)
	}
}

// secret is a password no message may show. It contains YAML syntax.
const secret = "Zq9!s3cr3t: {inject: [1]}"

func TestHTTPBearerToken(t *testing.T) {
	yml := minimal + "http:\n  bearer_token: ${HTTP_TOKEN}\n"
	c := mustParse(t, yml, map[string]string{"HTTP_TOKEN": secret})
	if c.HTTP.BearerToken != secret {
		t.Errorf("token = %q", c.HTTP.BearerToken)
	}
	if r := c.Redacted(); r.HTTP.BearerToken != RedactedValue {
		t.Errorf("Redacted token = %q", r.HTTP.BearerToken)
	}
	assertNoSecret(t, "String", c.String())
	_, err := Parse([]byte(minimal+"http:\n  bearer_token: literal-token\n"), nil)
	if _, ok := findProblem(problems(t, err), "http.bearer_token", "${ENV_VAR}"); !ok {
		t.Errorf("literal token: %v", err)
	}
	// An empty variable counts as absent (as for every key): no token.
	if c := mustParse(t, yml, map[string]string{"HTTP_TOKEN": ""}); c.HTTP.BearerToken != "" {
		t.Errorf("empty variable gave token %q", c.HTTP.BearerToken)
	}
}

func TestSecretsNeverLeak(t *testing.T) {
	env := map[string]string{"SECRET": secret, "KAFKA_PASSWORD": secret}
	sasl := "kafka:\n  sasl:\n    mechanism: plain\n    username: ${SECRET}\n    password: ${KAFKA_PASSWORD}\n"
	broken := []string{
		// decoding problems
		"kafka:\n  input_partitions: ${SECRET}\n",
		"window:\n  size: ${SECRET}\n",
		"privacy:\n  order: ${SECRET}\n",
		"generator:\n  enabled: ${SECRET}\n",
		"contribution:\n  max_tracked_users: ${SECRET}\n",
		sasl + "  group_id: x\n  group_id: y\n",
		sasl + "  brokers: [\"${SECRET}\"]\n  nope: 1\n",
		// validation problems
		"kafka:\n  brokers: [\"${SECRET}\", \"x:${SECRET}\"]\n  input_topic: ${SECRET}\n  output_topic: ${SECRET}\n  dead_letter_topic: ${SECRET}\n",
		"kafka:\n  brokers: ${SECRET}\n",
		"kafka:\n  tls:\n    enabled: true\n    ca_file: ${SECRET}\n    cert_file: /tmp/${SECRET}\n    key_file: ${SECRET}\n",
		"kafka:\n  sasl:\n    mechanism: ${SECRET}\n    password: ${KAFKA_PASSWORD}\n",
		"events:\n  format: ${SECRET}\n  time_field: ${SECRET}\n  user_field: ${SECRET}\n",
		"privacy:\n  mechanism: ${SECRET}\n  calibration: ${SECRET}\n  neighbour: ${SECRET}\n",
		"log:\n  format: ${SECRET}\n  level: ${SECRET}\n",
	}
	histograms := "histograms:\n  - name: ${SECRET}\n    field: f\n    bins: [\"${SECRET}\", \"${SECRET}\", a]\n    overflow_bin: x${SECRET}\n    group_by: g\n    groups: [\"${SECRET}\", \"${SECRET}\"]\n  - name: ${SECRET}\n    field: f\n    bins: [a, b]\n"
	for i, b := range broken {
		yml := b + "histograms:\n  - {name: h, field: f, bins: [a, b]}\nprivacy:\n  budget:\n    epsilon: 1\n"
		if i == 0 {
			yml = b + histograms + "privacy:\n  budget:\n    epsilon: 1\n"
		}
		_, err := Parse([]byte(yml), envOf(env))
		if err == nil {
			t.Errorf("case %d: want an error", i)
			continue
		}
		assertNoSecret(t, fmt.Sprintf("case %d error", i), err.Error())
		for _, p := range problems(t, err) {
			assertNoSecret(t, fmt.Sprintf("case %d problem", i), p.String())
		}
	}
	// Validation on its own (decoding succeeded), with the secret in many
	// places at once.
	yml := histograms + "kafka:\n  brokers: [\"${SECRET}\"]\n  output_topic: ${SECRET}\n" + "privacy:\n  mechanism: ${SECRET}\n  budget:\n    epsilon: 1\n"
	_, err := Parse([]byte(yml), envOf(env))
	if err == nil {
		t.Fatal("want an error")
	}
	probs := problems(t, err)
	if len(probs) < 6 {
		t.Errorf("want many problems, got %v", err)
	}
	assertNoSecret(t, "validation error", err.Error())

	// A valid config holding the secret: not in String, Redacted, JSON, fmt.
	c := mustParse(t, minimal+sasl+"  group_id: ${SECRET}\n", env)
	if c.Kafka.SASL.Password != secret || c.Kafka.GroupID != secret {
		t.Fatalf("secret not loaded: %q", c.Kafka.GroupID)
	}
	r := c.Redacted()
	if r.Kafka.SASL.Password != RedactedValue || r.Kafka.SASL.Username != RedactedValue || r.Kafka.GroupID != RedactedValue {
		t.Errorf("Redacted: %+v", r.Kafka)
	}
	if c.Kafka.SASL.Password != secret {
		t.Error("Redacted changed the original")
	}
	js, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	ys, err := yaml.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	// Below the Config, only the password is known to be secret.
	c2 := mustParse(t, minimal+"kafka:\n  sasl:\n    mechanism: plain\n    username: stage\n    password: ${KAFKA_PASSWORD}\n", env)
	saslJS, err := json.Marshal(c2.Kafka.SASL)
	if err != nil {
		t.Fatal(err)
	}
	for what, s := range map[string]string{
		"String":          c.String(),
		"%v":              fmt.Sprintf("%v", c),
		"%+v":             fmt.Sprintf("%+v", *c),
		"%#v":             fmt.Sprintf("%#v", c),
		"%s in a list":    fmt.Sprintf("%s", []Config{*c}), // fmt formats the elements itself
		"Redacted %+v":    fmt.Sprintf("%+v", r),
		"sasl %+v":        fmt.Sprintf("%+v", c2.Kafka.SASL),
		"sasl %#v":        fmt.Sprintf("%#v", c2.Kafka.SASL),
		"kafka %+v":       fmt.Sprintf("%+v", c2.Kafka),
		"kafka %v":        fmt.Sprintf("%v", &c2.Kafka),
		"json":            string(js),
		"yaml":            string(ys),
		"sasl json":       string(saslJS),
		"redacted string": r.String(),
	} {
		assertNoSecret(t, what, s)
	}
	if !strings.Contains(c.String(), RedactedValue) {
		t.Errorf("String() does not mark redactions:\n%s", c.String())
	}
}

func assertNoSecret(t *testing.T, what, s string) {
	t.Helper()
	for _, part := range []string{secret, "Zq9!s3cr3t", "inject"} {
		if strings.Contains(s, part) {
			t.Errorf("%s shows the secret:\n%s", what, s)
			return
		}
	}
}

func TestRedactedKeepsOrdinaryValues(t *testing.T) {
	c := mustParse(t, base, map[string]string{})
	r := c.Redacted()
	if r.Kafka.Brokers[0] != "localhost:9092" || r.Histograms[0].Bins[0] != "home" {
		t.Errorf("ordinary values redacted: %+v", r)
	}
	r.Histograms[0].Bins[0] = "changed"
	r.Kafka.Brokers[0] = "changed"
	if c.Histograms[0].Bins[0] != "home" || c.Kafka.Brokers[0] != "localhost:9092" {
		t.Error("Redacted shares slices with the original")
	}
}
