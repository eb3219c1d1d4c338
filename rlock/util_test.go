package rlock_test

import (
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func runtimeGoroutines() int { return runtime.NumGoroutine() }

// seedOf is the seed of a seeded test: the one env names (to replay a run), else the clock's;
// it logs it with the line that replays the run.
func seedOf(t *testing.T, env string) uint64 {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv(env); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		require.NoError(t, err, env)
		seed = s
	}
	t.Logf("seed %d (%s=%d replays this run)", seed, env, seed)
	return seed
}
