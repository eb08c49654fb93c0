package supervisor

import (
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

func TestExitOf(t *testing.T) {
	l := Limits{CPUSeconds: 2}
	signaled := func(sig syscall.Signal) unix.WaitStatus { return unix.WaitStatus(sig) }
	if e := exitOf(reaped{status: signaled(syscall.SIGXCPU)}, l); e.Limit != "cpu_seconds" || e.Code != -1 {
		t.Errorf("SIGXCPU: %+v", e)
	}
	if e := exitOf(reaped{status: signaled(syscall.SIGXFSZ)}, l); e.Limit != "max_file_bytes" {
		t.Errorf("SIGXFSZ: %+v", e)
	}
	spent := reaped{status: signaled(syscall.SIGKILL)}
	spent.usage.Utime.Sec = 3
	if e := exitOf(spent, l); e.Limit != "cpu_seconds" {
		t.Errorf("SIGKILL past the CPU limit: %+v", e)
	}
	if e := exitOf(reaped{status: signaled(syscall.SIGKILL)}, l); e.Limit != "" || e.Signal != int(syscall.SIGKILL) {
		t.Errorf("SIGKILL: %+v", e)
	}
	if e := exitOf(reaped{status: unix.WaitStatus(3 << 8)}, l); e.Code != 3 || e.Signal != 0 {
		t.Errorf("exit 3: %+v", e)
	}
}
