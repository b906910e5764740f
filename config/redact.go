package config

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"

	"go.yaml.in/yaml/v3"
)

// Redacted returns a deep copy of c fit for logging: every secret (such as
// kafka.sasl.password) and every string that came from a ${ENV_VAR}
// reference is replaced by "[redacted]" ([RedactedValue]). Numbers, bools
// and durations from the environment are kept.
func (c *Config) Redacted() Config {
	out := *c
	out.Kafka.Brokers = slices.Clone(c.Kafka.Brokers)
	out.Histograms = slices.Clone(c.Histograms)
	for i := range out.Histograms {
		out.Histograms[i].Bins = slices.Clone(out.Histograms[i].Bins)
		out.Histograms[i].Groups = slices.Clone(out.Histograms[i].Groups)
	}
	redact(c, reflect.ValueOf(&out).Elem(), "", false, false)
	return out
}

// redact walks v (part of a deep copy) and replaces secrets and strings from
// the environment. env is inherited by the elements of a list that came from
// the environment as a whole.
func redact(c *Config, v reflect.Value, path string, secret, env bool) {
	env = env || c.fromEnv(path)
	switch v.Kind() {
	case reflect.Struct:
		if v.Type() == durationType {
			return
		}
		fields, names := structFields(v.Type())
		for _, name := range names {
			f := fields[name]
			redact(c, v.Field(f.index), join(path, name), f.secret, false)
		}
	case reflect.Slice:
		for i := 0; i < v.Len(); i++ {
			redact(c, v.Index(i), fmt.Sprintf("%s[%d]", path, i), false, env)
		}
	case reflect.String:
		if v.String() != "" && (secret || env) {
			v.SetString(RedactedValue)
		}
	}
}

// String renders the configuration as YAML with secrets and values from the
// environment redacted (see [Config.Redacted]).
func (c Config) String() string {
	b, err := yaml.Marshal(plainConfig(c.Redacted()))
	if err != nil {
		return "config: " + err.Error()
	}
	return string(b)
}

// GoString is String, so that %#v does not print secrets either.
func (c Config) GoString() string { return c.String() }

// plainConfig has Config's fields but none of its methods.
type plainConfig Config

// MarshalYAML marshals the redacted configuration (see [Config.Redacted]),
// so that no encoding of a Config shows secrets.
func (c Config) MarshalYAML() (any, error) { return plainConfig(c.Redacted()), nil }

// MarshalJSON marshals the redacted configuration (for structured logs).
func (c Config) MarshalJSON() ([]byte, error) { return json.Marshal(plainConfig(c.Redacted())) }

// String shows the SASL settings with the password redacted.
func (s SASL) String() string {
	pw := ""
	if s.Password != "" {
		pw = RedactedValue
	}
	return fmt.Sprintf("{mechanism: %q, username: %q, password: %q}", s.Mechanism, s.Username, pw)
}

// GoString is String, so that %#v does not print the password either.
func (s SASL) GoString() string { return s.String() }

// plainSASL has SASL's fields but none of its methods.
type plainSASL SASL

func (s SASL) redacted() plainSASL {
	if s.Password != "" {
		s.Password = RedactedValue
	}
	return plainSASL(s)
}

// MarshalYAML marshals the settings with the password redacted.
func (s SASL) MarshalYAML() (any, error) { return s.redacted(), nil }

// MarshalJSON marshals the settings with the password redacted.
func (s SASL) MarshalJSON() ([]byte, error) { return json.Marshal(s.redacted()) }
