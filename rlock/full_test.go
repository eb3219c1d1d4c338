package rlock_test

import (
	"os"
	"testing"

	"github.com/relock-go/relock/internal/redistest"
)

// envFull, set to anything but "" or "0" (.ci/run sets it), runs the suite in full: the
// model-based test and the RedLock explorer at their full budgets, and the tests on a real
// Redis Cluster. Without it, the README's `go test ./...` runs the two explorers on short
// budgets and skips the Cluster tests (each starts a 3-master, 3-replica cluster of its own:
// about two minutes in all), so that it stays within 5 minutes on 2 cores.
const envFull = "RELOCK_FULL"

// fullRun reports whether envFull asks for the full suite.
func fullRun() bool {
	v := os.Getenv(envFull)
	return v != "" && v != "0"
}

// startCluster is redistest.StartCluster for a test that needs a real Redis Cluster: skipped
// under -short, and unless the suite runs in full (envFull).
func startCluster(t *testing.T, opts ...redistest.Option) *redistest.Cluster {
	t.Helper()
	skipShortCluster(t)
	return redistest.StartCluster(t, opts...)
}
