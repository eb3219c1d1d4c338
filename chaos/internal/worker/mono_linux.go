//go:build linux

package worker

import "golang.org/x/sys/unix"

// Mono is CLOCK_MONOTONIC in nanoseconds: one clock for every process on the machine, so
// the critical sections that contender processes report can be compared with each other.
func Mono() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(err)
	}
	return ts.Nano()
}
