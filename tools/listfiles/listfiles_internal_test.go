package listfiles

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	wt "github.com/toolwire/toolwire/tools/workspace/workspacetest"
)

// TestListingKeepsWhatItLists lists a folder of 2,000 entries (among them
// folders of 3 files) with caps from 1 to past the folder's size and depths
// 1 and 2: each listing is the one sorting whole folders makes, while
// reading a folder keeps no more names than the listing has room for
// (keeping them all held 125 MiB a call for 200,000 long names).
func TestListingKeepsWhatItLists(t *testing.T) {
	t.Parallel()
	e := wt.New(t, nil)
	for _, i := range rand.Perm(2000) { // made out of order
		name := fmt.Sprintf("wide/f%04d", i)
		if i%100 != 50 {
			e.Write(t, name, "")
			continue
		}
		for _, f := range []string{"a", "b", "c"} {
			e.Write(t, name+"/"+f, f)
		}
	}
	for _, limit := range []int{1, 10, 51, 999, 5000} {
		for _, depth := range []int{1, 2} {
			t.Run(fmt.Sprintf("cap %d depth %d", limit, depth), func(t *testing.T) {
				t.Parallel()
				l := lister{ws: e.WS, max: limit, maxRead: 100_000, d: Details{Path: "wide", Entries: []Entry{}}}
				if err := l.walk(context.Background(), "wide", depth); err != nil {
					t.Fatal(err)
				}
				want := Details{Path: "wide", Entries: []Entry{}}
				listAll(t, e.Dir, "wide", depth, limit, &want)
				if diff := cmp.Diff(want, l.d); diff != "" {
					t.Errorf("details (-want +got):\n%s", diff)
				}
				if l.held > limit {
					t.Errorf("reading a folder kept %d entries at once; want at most the cap, %d", l.held, limit)
				}
			})
		}
	}
}

// listAll is the listing as sorting whole folders makes it: the reference.
func listAll(t *testing.T, root, dir string, depth, limit int, d *Details) {
	entries, err := os.ReadDir(filepath.Join(root, dir)) // sorted
	if err != nil {
		t.Fatal(err)
	}
	for _, de := range entries {
		if len(d.Entries) == limit {
			d.Truncated = true
			return
		}
		e := Entry{Path: path.Join(dir, de.Name()), Type: kind(de.Type())}
		if info, err := de.Info(); err == nil && e.Type == "file" {
			e.Size = info.Size()
		}
		d.Entries = append(d.Entries, e)
		if e.Type == "dir" && depth > 1 {
			listAll(t, root, e.Path, depth-1, limit, d)
		}
	}
}
