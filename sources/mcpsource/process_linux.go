package mcpsource

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// setDeathSignal has the kernel kill the server when toolwire dies,
// unless a signal is set already.
func setDeathSignal(a *syscall.SysProcAttr) {
	if a.Pdeathsig == 0 {
		a.Pdeathsig = syscall.SIGKILL
	}
}

// waitExit waits until the child pid has exited and reports true, leaving
// it to be reaped (WNOWAIT), so that its ID still names its group.
func waitExit(pid int) bool {
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if err != unix.EINTR {
			return err == nil
		}
	}
}
