package window

import "testing"

func TestStart(t *testing.T) {
	for _, tc := range []struct{ t, size, want int64 }{
		{0, 60000, 0},
		{59999, 60000, 0},
		{60000, 60000, 60000},
		{-1, 60000, -60000},
		{-60000, 60000, -60000},
		{-60001, 60000, -120000},
		{1700000042000, 60000, 1700000040000},
	} {
		if got := Start(tc.t, tc.size); got != tc.want {
			t.Errorf("Start(%d, %d) = %d, want %d", tc.t, tc.size, got, tc.want)
		}
	}
}
