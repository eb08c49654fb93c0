//go:build !linux

package usage

import (
	"io/fs"
	"path/filepath"
	"syscall"
)

// Measure measures the roots, stopping once past either limit (0: none):
// bytes allocated, a file with several links once, and entries.
func Measure(roots []string, maxBytes, maxFiles uint64) Usage {
	var u Usage
	seen := map[[2]uint64]bool{}
	over := func() bool {
		return (maxBytes > 0 && u.Bytes > maxBytes) || (maxFiles > 0 && u.Files > maxFiles)
	}
	for _, root := range roots {
		_ = filepath.WalkDir(root, func(_ string, d fs.DirEntry, err error) error {
			if err != nil {
				return nil
			}
			info, err := d.Info()
			if err != nil {
				return nil
			}
			u.Files++
			if st, ok := info.Sys().(*syscall.Stat_t); ok {
				if k := [2]uint64{uint64(st.Dev), uint64(st.Ino)}; st.Nlink > 1 && !d.IsDir() {
					if seen[k] {
						return nil
					}
					seen[k] = true
				}
				u.Bytes += uint64(st.Blocks) * 512
			} else {
				u.Bytes += uint64(info.Size())
			}
			if over() {
				return filepath.SkipAll
			}
			return nil
		})
		if over() {
			break
		}
	}
	return u
}
