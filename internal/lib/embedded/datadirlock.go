package embedded

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// ErrDataDirInUse: another broker — in this process or another — holds the
// data directory. Two brokers on one directory write one log twice over and
// damage it (a batch cut short, fetched again and again); Start refuses
// instead. `stage run` waits on it as a standby (internal/cli).
var ErrDataDirInUse = errors.New("embedded broker: the data directory is in use by another broker")

// lockFileName is the file in the data directory that a running broker
// holds an exclusive lock on (flock on Unix; kfake reads only its own files
// there).
const lockFileName = "broker.lock"

// lockDataDir creates dir if needed and takes the exclusive lock on its
// lock file, without waiting: ErrDataDirInUse if another broker holds it.
// The lock is held until the returned file is closed, or the process exits
// (a crash frees it).
func lockDataDir(dir string) (*os.File, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("embedded broker: data directory: %w", err)
	}
	path := filepath.Join(dir, lockFileName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("embedded broker: lock the data directory: %w", err)
	}
	if err := tryLock(f); err != nil {
		f.Close()
		if errors.Is(err, errWouldBlock) {
			return nil, fmt.Errorf("%w: %s (stop the other `stage run` or `stage broker` on it, or give this one another state.dir / --data-dir)", ErrDataDirInUse, dir)
		}
		return nil, fmt.Errorf("embedded broker: lock %s: %w", path, err)
	}
	return f, nil
}
