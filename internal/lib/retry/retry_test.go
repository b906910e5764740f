package retry

import (
	"context"
	"testing"
	"time"
)

func TestBackoffSequence(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		name string
		b    Backoff
		want []time.Duration
	}{
		{"doubling capped", Backoff{Initial: 200 * ms, Max: 5 * time.Second},
			[]time.Duration{200 * ms, 400 * ms, 800 * ms, 1600 * ms, 3200 * ms, 5 * time.Second, 5 * time.Second}},
		{"fixed", Backoff{Initial: time.Second, Max: time.Second},
			[]time.Duration{time.Second, time.Second, time.Second}},
		{"max below initial", Backoff{Initial: time.Second}, []time.Duration{time.Second, time.Second}},
		{"generator", Backoff{Initial: 50 * ms, Max: 2 * time.Second},
			[]time.Duration{50 * ms, 100 * ms, 200 * ms, 400 * ms, 800 * ms, 1600 * ms, 2 * time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := tc.b
			for i, w := range tc.want {
				if got := b.Next(); got != w {
					t.Fatalf("wait %d = %v, want %v", i, got, w)
				}
			}
			b.Reset()
			if got := b.Next(); got != tc.want[0] {
				t.Fatalf("after Reset: %v, want %v", got, tc.want[0])
			}
		})
	}
}

func TestBackoffJitterWithinHalfStep(t *testing.T) {
	b := Backoff{Initial: 100 * time.Millisecond, Max: 400 * time.Millisecond, Jitter: true}
	steps := []time.Duration{100, 200, 400, 400, 400}
	for i, s := range steps {
		s *= time.Millisecond
		got := b.Next()
		if got < s/2 || got > s {
			t.Fatalf("wait %d = %v, want in [%v, %v]", i, got, s/2, s)
		}
	}
}

func TestSleepEndsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	if err := Sleep(ctx, time.Hour); err == nil {
		t.Fatal("Sleep on a cancelled context returned nil")
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("Sleep took %v after cancel", d)
	}
	if err := Sleep(context.Background(), time.Millisecond); err != nil {
		t.Fatalf("Sleep: %v", err)
	}
}
