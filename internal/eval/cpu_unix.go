//go:build unix

package eval

import (
	"syscall"
	"time"
)

// ProcessCPU is the process's user plus system CPU time so far (0 where
// it is not measured).
func ProcessCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
