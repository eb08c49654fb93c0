package deploy

import (
	"os/exec"
	"syscall"
)

// dieWithTest makes the kernel kill cmd's process when the test binary
// dies: a go test timeout ends the binary without running cleanups, and no
// etcd or kube-apiserver may outlive it.
func dieWithTest(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
