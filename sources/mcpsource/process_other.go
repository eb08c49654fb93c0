//go:build !linux

package mcpsource

import "syscall"

// setDeathSignal does nothing: Pdeathsig is Linux's.
func setDeathSignal(*syscall.SysProcAttr) {}

// waitExit reports false: only Linux's waitid is used to wait for a child
// without reaping it. The server's group is then signalled on closing
// only, not when it exits on its own.
func waitExit(int) bool { return false }
