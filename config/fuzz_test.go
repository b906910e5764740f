package config

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// FuzzParse checks, for any input, that Parse does not panic, that it
// returns either a config that passes Validate or a *ValidationError listing
// at least one problem, that the result is the same on a second call, and
// that no message or rendering shows a value from the environment. The seed
// corpus is in testdata/fuzz/FuzzParse.
func FuzzParse(f *testing.F) {
	f.Add([]byte(minimal))
	f.Add([]byte(base))
	env := envOf(map[string]string{
		"SECRET":         secret,
		"KAFKA_PASSWORD": secret,
		"PORT":           "9092",
		"EPS":            "0.5",
		"EMPTY":          "",
	})
	leaks := func(data []byte, out string) bool {
		for _, part := range []string{secret, "Zq9!s3cr3t"} {
			if !bytes.Contains(data, []byte(part)) && strings.Contains(out, part) {
				return true
			}
		}
		return false
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c1, err1 := Parse(data, env)
		c2, err2 := Parse(data, env)
		if (err1 == nil) != (err2 == nil) {
			t.Fatalf("not deterministic: %v / %v", err1, err2)
		}
		if err1 != nil {
			if c1 != nil {
				t.Fatal("a config returned with an error")
			}
			if err1.Error() != err2.Error() {
				t.Fatalf("errors differ:\n%v\n%v", err1, err2)
			}
			var ve *ValidationError
			if !errors.As(err1, &ve) || len(ve.Problems) == 0 {
				t.Fatalf("want a *ValidationError with problems, got %T %v", err1, err1)
			}
			if leaks(data, err1.Error()) {
				t.Fatalf("error shows a value from the environment:\n%v", err1)
			}
			return
		}
		if !reflect.DeepEqual(c1, c2) {
			t.Fatalf("configs differ:\n%s\n%s", c1, c2)
		}
		if err := c1.Validate(); err != nil {
			t.Fatalf("Parse returned a config that fails Validate: %v", err)
		}
		if s := c1.String(); leaks(data, s) {
			t.Fatalf("String shows a value from the environment:\n%s", s)
		}
	})
}

// TestFuzzSeeds keeps the committed corpus meaningful: valid_* seeds parse,
// broken_* seeds do not.
func TestFuzzSeeds(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzParse")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	env := envOf(map[string]string{"SECRET": secret, "KAFKA_PASSWORD": secret, "PORT": "9092", "EPS": "0.5"})
	for _, e := range entries {
		raw, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		header, lit, ok := strings.Cut(strings.TrimSpace(string(raw)), "\n")
		if !ok || header != "go test fuzz v1" || !strings.HasPrefix(lit, "[]byte(") || !strings.HasSuffix(lit, ")") {
			t.Fatalf("%s: not a fuzz corpus file", e.Name())
		}
		data, err := strconv.Unquote(strings.TrimSuffix(strings.TrimPrefix(lit, "[]byte("), ")"))
		if err != nil {
			t.Fatalf("%s: %v", e.Name(), err)
		}
		_, err = Parse([]byte(data), env)
		switch {
		case strings.HasPrefix(e.Name(), "valid_") && err != nil:
			t.Errorf("%s: %v", e.Name(), err)
		case strings.HasPrefix(e.Name(), "broken_") && err == nil:
			t.Errorf("%s: want an error", e.Name())
		}
	}
}
