//go:build race

package rlock_test

// raceEnabled: the race detector is on (allocation counts differ: it empties sync.Pools).
const raceEnabled = true
