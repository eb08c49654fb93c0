//go:build !linux

package supervisor

import "os"

// Main exits: the sandbox needs Linux.
func Main() { os.Exit(1) }
