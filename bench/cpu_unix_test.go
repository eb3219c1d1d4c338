//go:build unix

package bench

import (
	"syscall"
	"time"
)

// processCPU is the user + system CPU time this process has used so far (getrusage
// RUSAGE_SELF: the benchmark's client, not the redis-server children), or -1 if unknown.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return -1
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
