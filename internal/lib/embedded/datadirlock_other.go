//go:build !unix

package embedded

import (
	"errors"
	"os"
)

var errWouldBlock = errors.New("would block")

// tryLock does not lock where flock is missing: two brokers on one data
// directory are not refused there.
func tryLock(*os.File) error { return nil }
