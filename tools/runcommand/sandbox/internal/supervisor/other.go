//go:build !linux

package supervisor

import "os"

// Main exits: the sandbox needs Linux.
func Main() { os.Exit(1) }

// StartTime is 0: the sandbox needs Linux.
func StartTime(int) uint64 { return 0 }
