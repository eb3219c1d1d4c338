package main

import (
	"os/exec"
	"syscall"
)

// setPdeathsig kills redis-server if this process dies.
func setPdeathsig(c *exec.Cmd) { c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} }
