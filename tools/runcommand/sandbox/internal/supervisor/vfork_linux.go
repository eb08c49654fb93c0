//go:build amd64 || arm64

package supervisor

// rawVfork makes a system call that may return twice on one stack (clone
// with CLONE_VM|CLONE_VFORK), in assembly as package syscall does. Call it
// directly from the function that goes on in the child: the child's later
// calls reuse the stack below that function's frame.
func rawVfork(trap, a1, a2, a3 uintptr) (r1, err uintptr)
