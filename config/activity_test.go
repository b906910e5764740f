package config

import "testing"

// TestExpectedWindowsPerUser: privacy.expected_windows_per_user is
// optional (absent or 0: not given, as Config.String writes it); otherwise
// it is refused with its line when it is not a finite number, negative, or
// more than the windows of one period.
func TestExpectedWindowsPerUser(t *testing.T) {
	// minimal's privacy block, then the figure on line 9; 1m windows and a
	// 24h period (1,440 windows) by default.
	for _, tc := range []struct {
		name, value, frag string
	}{
		{"not a number", ".nan", "finite"},
		{"infinite", ".inf", "finite"},
		{"negative infinite", "-.inf", "finite"},
		{"negative", "-3", "greater than 0"},
		{"just below zero", "-0.001", "greater than 0"},
		{"more than the period's windows", "1441", "at most the 1440 windows"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(minimal+"  expected_windows_per_user: "+tc.value+"\n"), nil)
			p, ok := findProblem(problems(t, err), "privacy.expected_windows_per_user", tc.frag)
			if !ok {
				t.Fatalf("want privacy.expected_windows_per_user: ...%s..., got %v", tc.frag, err)
			}
			if p.Line != 9 {
				t.Errorf("%v: line %d, want 9", p, p.Line)
			}
		})
	}
	for _, tc := range []struct {
		name, yml string
		want      float64
	}{
		{"absent: not given", minimal, 0},
		{"zero: not given", minimal + "  expected_windows_per_user: 0\n", 0},
		{"a whole day of 1m windows", minimal + "  expected_windows_per_user: 1440\n", 1440},
		{"a fraction", minimal + "  expected_windows_per_user: 2.5\n", 2.5},
		{"coarser windows", minimal + "  expected_windows_per_user: 24\nwindow: {size: 1h}\n", 24},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := mustParse(t, tc.yml, nil)
			if got := cfg.Privacy.ExpectedWindowsPerUser; got != tc.want {
				t.Errorf("expected_windows_per_user = %v, want %v", got, tc.want)
			}
		})
	}
	// With 1h windows a day has 24 of them: 25 is refused.
	_, err := Parse([]byte(minimal+"  expected_windows_per_user: 25\nwindow: {size: 1h}\n"), nil)
	if _, ok := findProblem(problems(t, err), "privacy.expected_windows_per_user", "at most the 24 windows"); !ok {
		t.Errorf("25 windows of 1h in a day: want refused, got %v", err)
	}
}
