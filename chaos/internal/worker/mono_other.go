//go:build !linux

package worker

import "time"

// Mono falls back to the wall clock where CLOCK_MONOTONIC is not reachable.
func Mono() int64 { return time.Now().UnixNano() }
