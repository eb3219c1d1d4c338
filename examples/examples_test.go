package examples

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
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
		})
	}
}
