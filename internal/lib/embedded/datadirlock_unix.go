//go:build unix

package embedded

import (
	"os"
	"syscall"
)

var errWouldBlock = syscall.EWOULDBLOCK

// tryLock takes an exclusive flock on f without waiting. flock locks belong
// to the open file, so a second open in the same process conflicts too.
func tryLock(f *os.File) error {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err != syscall.EINTR {
			return err
		}
	}
}
