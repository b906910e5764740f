package ledger

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"
)

func admUnit(hist string, w, period int64) *Unit {
	return &Unit{Histogram: hist, WindowStart: w, WindowEnd: w + 60_000, Period: period, Status: StatusBudgetExhausted,
		Messages: []Message{{Key: []byte(hist), Value: []byte(`{}`)}}}
}

// The admissions of a window are recorded with its units, in the same
// transaction: a window refused (already recorded) or malformed records
// none, and a window of a new period deletes the earlier periods'.
func TestRecordWindowAdmitted(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	const day = 86_400_000
	steps := []struct {
		name   string
		units  []*Unit
		adm    *Admitted
		errIs  error // nil: must succeed (unless errAny)
		errAny bool
		period int64
		want   map[uint64]uint16
	}{
		{"first window", []*Unit{admUnit("a", 0, 0), admUnit("b", 0, 0)}, &Admitted{Period: 0, Users: []uint64{7, 3, 1 << 63}},
			nil, false, 0, map[uint64]uint16{7: 1, 3: 1, 1 << 63: 1}},
		{"second window", []*Unit{admUnit("a", 60_000, 0)}, &Admitted{Period: 0, Users: []uint64{3, 9}},
			nil, false, 0, map[uint64]uint16{7: 1, 3: 2, 1 << 63: 1, 9: 1}},
		{"already recorded: nothing changes", []*Unit{admUnit("c", 60_000, 0), admUnit("a", 60_000, 0)}, &Admitted{Period: 0, Users: []uint64{3, 7}},
			ErrAlreadyRecorded, false, 0, map[uint64]uint16{7: 1, 3: 2, 1 << 63: 1, 9: 1}},
		{"a user twice: nothing recorded", []*Unit{admUnit("a", 120_000, 0)}, &Admitted{Period: 0, Users: []uint64{5, 5}},
			nil, true, 0, map[uint64]uint16{7: 1, 3: 2, 1 << 63: 1, 9: 1}},
		{"admissions of another period", []*Unit{admUnit("a", 120_000, 0)}, &Admitted{Period: day, Users: []uint64{5}},
			nil, true, 0, map[uint64]uint16{7: 1, 3: 2, 1 << 63: 1, 9: 1}},
		{"no admissions", []*Unit{admUnit("a", 180_000, 0)}, nil,
			nil, false, 0, map[uint64]uint16{7: 1, 3: 2, 1 << 63: 1, 9: 1}},
		{"next period: a fresh count", []*Unit{admUnit("a", day, day)}, &Admitted{Period: day, Users: []uint64{3}},
			nil, false, day, map[uint64]uint16{3: 1}},
		{"the earlier period is deleted", nil, nil, nil, false, 0, map[uint64]uint16{}},
	}
	for _, st := range steps {
		if st.units != nil {
			err := l.RecordWindowAdmitted(context.Background(), st.units, Curve{}, st.adm)
			switch {
			case st.errIs != nil && !errors.Is(err, st.errIs):
				t.Fatalf("%s: got %v, want %v", st.name, err, st.errIs)
			case st.errAny && err == nil:
				t.Fatalf("%s: recorded", st.name)
			case st.errIs == nil && !st.errAny && err != nil:
				t.Fatalf("%s: %v", st.name, err)
			}
		}
		got, err := l.Admissions(st.period)
		if err != nil {
			t.Fatal(err)
		}
		if !maps.Equal(got, st.want) {
			t.Fatalf("%s: admissions %v, want %v", st.name, got, st.want)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l, err = Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if got, _ := l.Admissions(day); !maps.Equal(got, map[uint64]uint16{3: 1}) {
		t.Fatalf("after reopening: %v", got)
	}
}

// The user hash key is generated once and then read back, across reopens.
func TestUserHashKey(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	gen := func() ([]byte, error) {
		calls++
		return bytes.Repeat([]byte{byte(calls)}, 16), nil
	}
	k1, err := l.UserHashKey(context.Background(), gen)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.UserHashKey(context.Background(), func() ([]byte, error) { return make([]byte, 15), nil }); err != nil {
		t.Fatalf("a recorded key must not be generated again: %v", err)
	}
	l.Close()
	if l, err = Open(dir); err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	k2, err := l.UserHashKey(context.Background(), gen)
	if err != nil {
		t.Fatal(err)
	}
	if calls != 1 || !bytes.Equal(k1, k2) || !bytes.Equal(k1, bytes.Repeat([]byte{1}, 16)) {
		t.Fatalf("keys %x, %x after %d generations", k1, k2, calls)
	}
	dir2 := t.TempDir()
	l2, err := Open(dir2)
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	if _, err := l2.UserHashKey(context.Background(), func() ([]byte, error) { return make([]byte, 15), nil }); err == nil {
		t.Fatalf("a 15-byte key was recorded")
	}
}

// Disk per admitted (user, period), reported for the README: n users
// admitted to each of k windows of one period (one transaction per window,
// as the stage records them).
func TestAdmissionsDiskBytes(t *testing.T) {
	if testing.Short() {
		t.Skip("writes ~10 MB")
	}
	const n, k = 100_000, 5
	dir := t.TempDir()
	l, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	size := func() int64 {
		fi, err := os.Stat(filepath.Join(dir, "stage.db"))
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	r := rand.New(rand.NewPCG(3, 4))
	users := make([]uint64, n)
	for i := range users {
		users[i] = r.Uint64()
	}
	before := size()
	for w := range int64(k) {
		if err := l.RecordWindowAdmitted(context.Background(), []*Unit{admUnit("a", w*60_000, 0)}, Curve{}, &Admitted{Period: 0, Users: users}); err != nil {
			t.Fatal(err)
		}
	}
	var used int64
	if err := l.db.View(func(tx *bolt.Tx) error {
		st := tx.Bucket(bucketAdmissions).Bucket(periodKey(0)).Stats()
		used = int64(st.LeafInuse + st.BranchInuse)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	grown := size() - before
	t.Logf("admissions on disk: %.1f bytes per (user, period) in use in pages, file grew by %.1f bytes per user (%d users, %d windows)",
		float64(used)/n, float64(grown)/n, n, k)
	got, err := l.Admissions(0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != n || got[users[0]] != k {
		t.Fatalf("%d users, first admitted %d times", len(got), got[users[0]])
	}
	if float64(used)/n > 64 {
		t.Errorf("%.1f bytes per user in use: more than a bbolt leaf element (16 + 8 + 2 bytes) at half-full pages", float64(used)/n)
	}
	l.Close()
}

// Prune deletes the admissions of the periods that ended before its bound,
// and keeps the others.
func TestPruneAdmissions(t *testing.T) {
	l, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	const day = 86_400_000
	if _, _, err := l.SetMeta(context.Background(), Meta{WindowMs: 60_000, PeriodMs: day}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []int64{day, 0} {
		// Written directly, the later period first: recording a later
		// period's admissions deletes the earlier ones itself.
		if err := l.db.Update(func(tx *bolt.Tx) error { return putAdmitted(tx, &Admitted{Period: p, Users: []uint64{1, 2}}) }); err != nil {
			t.Fatal(err)
		}
	}
	u := admUnit("a", day+60_000, day)
	u.Published = true
	if err := l.RecordWindow([]*Unit{u}, Curve{}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := l.Prune(context.Background(), day+60_000); err != nil {
		t.Fatal(err)
	}
	if got, _ := l.Admissions(0); len(got) != 0 {
		t.Errorf("period 0's admissions kept: %v", got)
	}
	if got, _ := l.Admissions(day); len(got) != 2 {
		t.Errorf("period day's admissions: %v", got)
	}
}
