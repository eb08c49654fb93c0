//go:build linux && !amd64 && !arm64

package supervisor

import "syscall"

// rawVfork starts the child as a plain fork (a copy of the supervisor)
// where there is no assembly for a vfork here.
//
//go:nosplit
func rawVfork(trap, a1, a2, a3 uintptr) (r1, err uintptr) {
	r, _, e := syscall.RawSyscall6(trap, uintptr(syscall.SIGCHLD), 0, 0, 0, 0, 0)
	return r, uintptr(e)
}
