//go:build !unix

package eval

import "time"

// ProcessCPU is not measured on this platform: 0.
func ProcessCPU() time.Duration { return 0 }
