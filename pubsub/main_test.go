package pubsub

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"testing"

	"go.uber.org/goleak"
)

// testParallel is how many of the tests marked t.Parallel run at once when the command line
// does not set -parallel (whose default is GOMAXPROCS: 2 on a 2-core machine). The sharded
// tests each start a Redis Cluster of their own and then mostly wait (for gossip, failovers,
// node timeouts): four at once (as redistest's cluster tests were measured with) take the
// package from 32 s to 18 s on 2 cores; their bounds are seconds.
const testParallel = 4

func TestMain(m *testing.M) {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		if err := flag.Set("test.parallel", strconv.Itoa(max(testParallel, runtime.GOMAXPROCS(0)))); err != nil {
			fmt.Fprintln(os.Stderr, "pubsub tests: -parallel:", err)
			os.Exit(2)
		}
	}
	goleak.VerifyTestMain(m)
}
