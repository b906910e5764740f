// Package cputime reads the process's CPU time, for benchmarks that
// report it beside ns/op: on a shared machine the load inflates ns/op,
// while CPU time does not count waiting for a core.
package cputime

import (
	"syscall"
	"time"
)

// Now is the process's user + system CPU time so far (every thread), 0
// when getrusage fails.
func Now() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
