package workspace

import "os"

// SetRename replaces the rename WriteFile ends with, so a test can interfere
// with it.
func SetRename(w *Workspace, f func(dir *os.Root, oldname, newname string) error) { w.rename = f }
