package tools

import (
	"context"
	"iter"
)

// Watch yields the registry's snapshot now, then each snapshot of a new
// revision, until ctx is done, stop is closed (nil: never) or the loop
// breaks. A change between two yields is never missed: the channel of the
// next change is taken before the snapshot is read. It is the one
// WatchTools loop of every surface.
func (r *Registry) Watch(ctx context.Context, stop <-chan struct{}) iter.Seq[*Snapshot] {
	return func(yield func(*Snapshot) bool) {
		last := ""
		for {
			changed := r.Changed() // before the snapshot, so no change is missed
			if snap := r.Snapshot(); snap.Revision() != last || last == "" {
				if !yield(snap) {
					return
				}
				last = snap.Revision()
			}
			select {
			case <-changed:
			case <-stop:
				return
			case <-ctx.Done():
				return
			}
		}
	}
}
