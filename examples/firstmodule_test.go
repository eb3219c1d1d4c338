package examples

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/relock-go/relock/internal/redistest"
)

// firstProgram is the README's first program made whole, as a new user writes it in a
// module of their own. Only the server differs: the README dials 127.0.0.1:6379, this one
// an embedded miniredis, which needs RESP2 and no cluster discovery (miniredis answers
// CLUSTER SLOTS). A real server needs neither, and its clock expires keys by itself.
const firstProgram = `// Command firstlock takes a lock, reads its fencing token and gives it back.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/rueidis"
	"github.com/relock-go/relock/rlock"
)

func main() {
	if err := run(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "firstlock:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	mr, err := miniredis.Run() // stands in for the Redis at 127.0.0.1:6379
	if err != nil {
		return err
	}
	defer mr.Close()

	c, err := rlock.Dial(rueidis.ClientOption{ // one per process
		InitAddress:       []string{mr.Addr()},
		AlwaysRESP2:       true, // miniredis only
		ForceSingleClient: true, // miniredis only
	})
	if err != nil {
		return err
	}
	defer c.Close()

	m := c.Mutex("invoice:42")          // a handle; the handle is an owner
	if err := m.Lock(ctx); err != nil { // blocks until held; the watchdog keeps it alive
		return err
	}
	first, err := m.Token(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("locked %s, fencing token %d\n", m.Name(), first)
	if err := m.Unlock(ctx); err != nil {
		return err
	}

	if err := m.Lock(ctx); err != nil {
		return err
	}
	next, err := m.Token(ctx)
	if err != nil {
		return errors.Join(err, m.Unlock(ctx))
	}
	fmt.Printf("locked again, fencing token %d\n", next)
	return m.Unlock(ctx) // an error wrapping rlock.ErrNotHeld: the lock was lost meanwhile
}
`

// TestFirstModule proves that a new user gets from the README to a running program in a
// module of their own: [newModule] makes a module outside the repository that points at this
// checkout, writes [firstProgram] into it, and builds and runs it, checking what it prints.
func TestFirstModule(t *testing.T) {
	out := runInNewModule(t, firstProgram)
	m := regexp.MustCompile(`(?m)^locked invoice:42, fencing token (\d+)\nlocked again, fencing token (\d+)\n\z`).
		FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("unexpected output of go run:\n%s", out)
	}
	first, _ := strconv.ParseInt(m[1], 10, 64)
	next, _ := strconv.ParseInt(m[2], 10, 64)
	if first <= 0 || next <= first {
		t.Errorf("fencing tokens %d then %d: want positive and rising", first, next)
	}
}

// TestREADMEFirstProgram does the same with the README's complete first program as it
// stands (the first go block that is a package main), on a real redis-server at
// $REDIS_ADDR, as the README runs it: it must build in a module of its own and exit 0.
func TestREADMEFirstProgram(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs a program in a new module")
	}
	readme, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var program string
	for _, m := range regexp.MustCompile("(?s)```go\n(.*?)\n```").FindAllStringSubmatch(string(readme), -1) {
		if strings.HasPrefix(m[1], "package main\n") {
			program = m[1] + "\n"
			break
		}
	}
	if program == "" {
		t.Fatal("README.md has no complete first program (a ```go block starting with package main)")
	}
	srv := redistest.Start(t) // skips without redis-server, unless $CI is set
	out := runInNewModule(t, program, "REDIS_ADDR="+srv.Addr(), "REDIS_URL=")
	if strings.TrimSpace(out) == "" {
		t.Fatal("the README's first program printed nothing")
	}
	t.Logf("the README's first program printed: %s", out)
}

// runInNewModule makes a module outside the repository (go mod init example.com/firstlock),
// writes program into its main.go, points it at this checkout with a replace directive, runs
// go mod tidy (see tidy), go build and go run there (with env added to the environment), and returns
// what go run printed on standard output. It skips with -short, and when no go command is on
// PATH.
//
// It runs offline against the module cache (GOPROXY=off): every module the new one needs
// to build is one relock's own build already needed, so a machine that built relock's
// tests has them (tidy tolerates only what dependencies' own tests import). The checksums come from relock's go.sum, copied in: a user gets the same ones from
// sum.golang.org, which an offline test cannot ask.
func runInNewModule(t *testing.T, program string, env ...string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs a program in a new module")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH: cannot build a module")
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if rel, err := filepath.Rel(root, dir); err == nil && !strings.HasPrefix(rel, "..") {
		t.Fatalf("the temporary directory %s is inside the repository %s", dir, root)
	}
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.sum"), sum, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(program), 0o644); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	goflags := strings.TrimSpace(output(t, exec.CommandContext(ctx, goBin, "env", "GOFLAGS")))
	env = append(append(os.Environ(), env...),
		"GOFLAGS="+strings.TrimSpace(goflags+" -mod=mod"),
		"GOPROXY=off",       // the module cache only: no network
		"GOWORK=off",        // no go.work above the temporary directory
		"GOTOOLCHAIN=local", // no toolchain download either
	)
	gocmd := func(args ...string) string {
		t.Helper()
		start := time.Now()
		cmd := exec.CommandContext(ctx, goBin, args...)
		cmd.Dir, cmd.Env = dir, env
		out := output(t, cmd)
		t.Logf("go %s: %v", strings.Join(args, " "), time.Since(start).Round(time.Millisecond))
		return out
	}

	gocmd("mod", "init", "example.com/firstlock")
	gocmd("mod", "edit",
		"-require=github.com/relock-go/relock@v0.0.0",
		"-replace=github.com/relock-go/relock="+root)
	tidy(t, ctx, goBin, dir, env)
	gomod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(gomod, []byte("github.com/redis/rueidis ")) {
		t.Errorf("go mod tidy did not require rueidis:\n%s", gomod)
	}
	gocmd("build", "-o", filepath.Join(dir, "firstlock"), ".")
	return gocmd("run", ".")
}

// tidy runs go mod tidy -e in dir and fails the test on any error but one kind: a package
// that only a dependency's own tests import, which an offline module cache need not hold
// (rueidis's tests import gomega; tidy looks for it to record its checksum, and a user's
// tidy, online, finds it). The build that follows proves the module needs nothing else.
func tidy(t *testing.T, ctx context.Context, goBin, dir string, env []string) {
	t.Helper()
	start := time.Now()
	cmd := exec.CommandContext(ctx, goBin, "mod", "tidy", "-e")
	cmd.Dir, cmd.Env = dir, env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("go mod tidy -e (in %s): %v\n%s", dir, err, stderr.Bytes())
	}
	// Each error is a block that starts with "go: " and, for an import chain, goes on in
	// tab-indented lines.
	for _, block := range strings.Split("\n"+stderr.String(), "\ngo: ") {
		if !strings.Contains(block, "cannot find") && !strings.Contains(block, "error") {
			continue // "downloading", "finding module": progress, not errors
		}
		if !strings.Contains(block, ".test imports") {
			t.Fatalf("go mod tidy -e (in %s) failed to resolve a package the program needs:\ngo: %s", dir, block)
		}
	}
	t.Logf("go mod tidy -e: %v", time.Since(start).Round(time.Millisecond))
}

// output runs cmd and returns its standard output, failing the test with everything cmd
// printed when it fails.
func output(t *testing.T, cmd *exec.Cmd) string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s (in %s): %v\n%s%s", strings.Join(cmd.Args, " "), cmd.Dir, err, stdout.Bytes(), stderr.Bytes())
	}
	return stdout.String()
}
