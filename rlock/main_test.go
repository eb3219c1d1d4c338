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
// does not set -parallel (whose default is GOMAXPROCS: 2 on a 2-core machine; more cores keep
// GOMAXPROCS); testParallelNoRace without the race detector. The parallel tests wait out
// leases, renewals and failovers: they cost little CPU, so more of them overlap than there
// are cores. Each starts its own redis-server(s) and uses its own names; none counts all
// goroutines or sets a package hook of its own (those stay serial, and serial tests never
// overlap parallel ones); those that set one of the registered hooks (export_test.go's
// testHooks) filter by their own names (DESIGN 15). Without the race detector each costs a fraction of the CPU, and 10 at once stall
// this process less than 6 do under -race (the gaps of a 5ms ticker over the parallel tests
// at d864deb, 2 cores: 99th percentile 14-17ms and 60-75 gaps over 20ms a minute at 10
// without -race; 31ms and 282 at 6 with it). The parallel tests took 88-91 s at 6, 57 s at
// 10, 46-52 s at 12 (where TestRedLock_allUp failed in two runs of three) and 45 s at 16
// (a 300ms cleanup timeout on miniredis ran out).
const (
	testParallel       = 6
	testParallelNoRace = 10
)

func TestMain(m *testing.M) {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		n := testParallel
		if !raceEnabled {
			n = testParallelNoRace
		}
		if err := flag.Set("test.parallel", strconv.Itoa(max(n, runtime.GOMAXPROCS(0)))); err != nil {
			fmt.Fprintln(os.Stderr, "rlock tests: -parallel:", err)
			os.Exit(2)
		}
	}
	goleak.VerifyTestMain(m)
}
