//go:build !linux

package runcommand

import "os"

// removeAll removes the call's TMPDIR (the sandbox needs Linux: no command
// ran there).
func removeAll(dir string) { _ = os.RemoveAll(dir) }

// callsDir returns the folder the calls' TMPDIRs are made in.
func callsDir() (string, error) { return os.TempDir(), nil }

// CheckTemp has nothing to make: the calls' TMPDIRs are made in the
// temporary folder itself.
func CheckTemp() error { return nil }
