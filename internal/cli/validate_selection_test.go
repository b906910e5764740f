package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/dpstage/stage/selection"
)

// TestValidatePrintsSelection (issue 30): with group_by and no groups,
// `stage validate` and `stage plan` print the selection's threshold, the
// distinct users at which a group is kept with probability ½ and 0.95 per
// window beside the batch optimum at the same (ε, δ, l0) — recomputed here
// from the printed (ε, δ) with selection.Batch — and its share of the
// budget; listed groups print none of it.
func TestValidatePrintsSelection(t *testing.T) {
	const base = `kafka:
  brokers: [localhost:9092]
histograms:
  - name: pages
    field: page
    bins: [home, search, other]
    group_by: product
%scontribution:
  max_windows_per_user: 3
privacy:
  mechanism: gaussian
  budget:
    epsilon: 1
    delta: 1.0e-6
`
	kept := regexp.MustCompile(`with probability ½ at (\d+) distinct users, 0\.95 at (\d+); batch optimum at (?:the same|the add/remove budget meeting one window's replace \(ε=[0-9.e-]+, δ=[0-9.e-]+\):) \(ε=([0-9.e-]+), δ=([0-9.e-]+), l0=1\) of one window: ½ at (\d+), 0\.95 at (\d+)`)
	for _, tc := range []struct {
		name, groups string
		selects      bool
	}{{"selected", "", true}, {"listed", "    groups: [a, b]\n", false}} {
		dir := t.TempDir()
		path := filepath.Join(dir, "c.yaml")
		if err := os.WriteFile(path, []byte(strings.Replace(base, "%s", tc.groups, 1)), 0o600); err != nil {
			t.Fatal(err)
		}
		for _, cmd := range []func([]string, *bytes.Buffer, *bytes.Buffer) int{
			func(a []string, o, e *bytes.Buffer) int { return Validate(a, o, e) },
			func(a []string, o, e *bytes.Buffer) int { return Plan(a, o, e) },
		} {
			var out, errb bytes.Buffer
			if code := cmd([]string{"--config", path}, &out, &errb); code != 0 {
				t.Fatalf("%s: exit %d: %s", tc.name, code, errb.String())
			}
			got := spaces.ReplaceAllString(out.String(), " ")
			m := kept.FindStringSubmatch(got)
			if (m != nil) != tc.selects {
				t.Fatalf("%s: selection line present %v:\n%s", tc.name, m != nil, out.String())
			}
			if m == nil {
				continue
			}
			n := make([]float64, len(m))
			for i := 1; i < len(m); i++ {
				n[i], _ = strconv.ParseFloat(m[i], 64)
			}
			b := selection.Batch{Epsilon: n[3], Delta: n[4], L0: 1}
			// The printed (ε, δ) are rounded to 4 and 3 digits: the batch
			// figures recomputed from them may move by one user.
			if d := float64(b.UsersAt(0.5)) - n[5]; d < -1 || d > 1 {
				t.Errorf("batch ½ printed %g, recomputed %d", n[5], b.UsersAt(0.5))
			}
			if d := float64(b.UsersAt(0.95)) - n[6]; d < -1 || d > 1 {
				t.Errorf("batch 0.95 printed %g, recomputed %d", n[6], b.UsersAt(0.95))
			}
			if !(n[1] < n[2]) || !strings.Contains(got, "selection share") || !strings.Contains(got, "selection vs batch the batch optimum run in each window") {
				t.Errorf("selection lines:\n%s", out.String())
			}
		}
	}
}
