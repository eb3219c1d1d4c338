package examples

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestExamples builds and runs every example program on its embedded miniredis, as a new
// user would with `go run ./examples/NAME`, and checks that it exits 0.
func TestExamples(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs programs")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	dirs, err := filepath.Glob("*/main.go")
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no examples found: %v", err)
	}
	bin := t.TempDir()
	for _, mainGo := range dirs {
		name := filepath.Dir(mainGo)
		t.Run(name, func(t *testing.T) {
			t.Parallel() // each builds its own binary and runs on its own embedded server
			exe := filepath.Join(bin, name)
			build := exec.Command(goBin, "build", "-o", exe, "./"+name)
			if out, err := build.CombinedOutput(); err != nil {
				t.Fatalf("go build ./examples/%s: %v\n%s", name, err, out)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			run := exec.CommandContext(ctx, exe)
			run.Env = append(os.Environ(), "REDIS_URL=", "REDIS_ADDR=") // the embedded server
			out, err := run.CombinedOutput()
			if err != nil {
				t.Fatalf("examples/%s: %v\n%s", name, err, out)
			}
			if len(out) == 0 {
				t.Fatalf("examples/%s printed nothing", name)
			}
			for _, claim := range claims[name] {
				if !regexp.MustCompile(claim).Match(out) {
					t.Errorf("examples/%s: no line matches %q; it printed:\n%s", name, claim, out)
				}
			}
		})
	}
}

// claims are lines each example must print (regular expressions), the results that show
// its primitive at work. Each program also checks them itself and exits 1 when one fails;
// these keep the printed text saying what the program checked.
var claims = map[string][]string{
	"quickstart": {`(?m)^with the lock: +counter = 100 \(want 100\), at most 1 goroutine inside`},
	"reentrant":  {`repository: locked, HoldCount=3`, `request B: Lock returned with HoldCount=1, A's HoldCount=0; Unlock: <nil>`},
	"watchdog":   {`unlocked after 3s: the lock was never lost`, `errors\.Is\(cause, rlock\.ErrLockLost\) = true`},
	"trylock":    {`B: Lock returned (9\d0ms|\d+(\.\d+)?s) after A's grant`, `B: still holds the lock, HoldCount=1`},
	"fairlock":   {`served in arrival order, one at a time: ann bob cid dee eve`, `queue key left in Redis: false`},
	"rwlock":     {`written=false read=true`, `cannot upgrade a read hold`},
	"semaphore":  {`at most [12] ran at once`, `available = 1 \(B holds no partial count\)`, `took 5, available = 0`},
	"permits":    {`acquired permits = 1`, `B: Release -> available = 1`},
	"latch":      {`TrySetCount\(3\) -> true; a second TrySetCount\(10\) -> false; Count = 3`, `Count = 0`},
	"multilock":  {`server 0's member locked: false`, `server 2's member locked: false`, `holding all three`},
	"spinlock":   {`HoldCount=2`, `B still spins`, `locked=false`},
	"httplock":   {`423 Locked`, `200 OK: document 42 edited`, `503 Service Unavailable`},
}
