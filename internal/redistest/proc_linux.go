//go:build linux

package redistest

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"
)

// sysProcAttr makes the kernel SIGKILL the redis-server child when the thread
// that started it dies (in practice: when the test binary dies), so a crashed
// or killed `go test` never leaves an orphaned redis-server behind.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// waitProcState polls /proc/<pid>/stat until the process state letter
// satisfies want, or the timeout expires.
func waitProcState(pid int, timeout time.Duration, want func(state byte) bool) error {
	deadline := time.Now().Add(timeout)
	var last byte
	for {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return fmt.Errorf("read /proc/%d/stat: %w", pid, err)
		}
		// Format: "pid (comm) S ...": comm may contain spaces/parens, so
		// take the field after the last ')'.
		s := string(b)
		if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
			last = s[i+2]
			if want(last) {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("process %d still in state %q after %v", pid, last, timeout)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// waitStopped waits until the process is actually stopped by SIGSTOP.
func waitStopped(pid int, timeout time.Duration) error {
	return waitProcState(pid, timeout, func(s byte) bool { return s == 'T' || s == 't' })
}

// waitContinued waits until the process is no longer stopped after SIGCONT.
func waitContinued(pid int, timeout time.Duration) error {
	return waitProcState(pid, timeout, func(s byte) bool { return s != 'T' && s != 't' })
}
