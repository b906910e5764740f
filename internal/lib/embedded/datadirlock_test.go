package embedded

import (
	"errors"
	"strings"
	"testing"
)

// TestDataDirLocked (issue 28 item 6): a second broker on a data directory
// that a running broker holds is refused with the reason (two brokers on
// one directory damage its log), across the first one's Stop and Restart;
// once the first is closed, the directory is free again.
func TestDataDirLocked(t *testing.T) {
	dir := t.TempDir()
	topics := map[string]int{"events": 1}
	first, err := Start(Config{DataDir: dir, Topics: topics})
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	second, err := Start(Config{DataDir: dir, Topics: topics})
	if err == nil {
		second.Close()
		t.Fatalf("a second broker started on %s while the first runs on it", dir)
	}
	if !errors.Is(err, ErrDataDirInUse) || !strings.Contains(err.Error(), dir) {
		t.Errorf("second Start: %v; want ErrDataDirInUse naming %s", err, dir)
	}
	t.Log(err)
	if err := first.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := Start(Config{DataDir: dir, Topics: topics}); !errors.Is(err, ErrDataDirInUse) {
		t.Errorf("Start while the first is stopped (not closed): %v; want ErrDataDirInUse", err)
	}
	if err := first.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	third, err := Start(Config{DataDir: dir, Topics: topics})
	if err != nil {
		t.Fatalf("Start after the first closed: %v", err)
	}
	third.Close()
}
