package rlock_test

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
// does not set -parallel (whose default is GOMAXPROCS: 2 on a 2-core machine; more cores keep GOMAXPROCS). The parallel
// tests wait out leases, renewals and failovers: they cost little CPU, so more of them
// overlap than there are cores. Each starts its own redis-server(s) and uses its own names;
// none sets a package hook or counts goroutines (those stay serial, and serial tests never
// overlap parallel ones).
const testParallel = 6

func TestMain(m *testing.M) {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		if err := flag.Set("test.parallel", strconv.Itoa(max(testParallel, runtime.GOMAXPROCS(0)))); err != nil {
			fmt.Fprintln(os.Stderr, "rlock tests: -parallel:", err)
			os.Exit(2)
		}
	}
	goleak.VerifyTestMain(m)
}
