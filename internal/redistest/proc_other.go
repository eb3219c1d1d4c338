//go:build !linux

package redistest

import (
	"syscall"
	"time"
)

// sysProcAttr returns nil: Pdeathsig is Linux-only, so on other systems a
// redis-server child can outlive a test binary that is killed abruptly.
func sysProcAttr() *syscall.SysProcAttr { return nil }

// waitStopped cannot observe the process state portably; it waits briefly so
// the signal is very likely delivered.
func waitStopped(pid int, timeout time.Duration) error {
	time.Sleep(20 * time.Millisecond)
	return nil
}

// waitContinued mirrors waitStopped for SIGCONT.
func waitContinued(pid int, timeout time.Duration) error {
	time.Sleep(20 * time.Millisecond)
	return nil
}
