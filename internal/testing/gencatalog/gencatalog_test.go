package gencatalog

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/toolwire/toolwire/tools"
)

// TestRegister: the catalog's tools are valid (the registry takes them),
// uniquely named, and the same for the same n.
func TestRegister(t *testing.T) {
	t.Parallel()
	reg, err := tools.NewRegistry()
	if err != nil {
		t.Fatal(err)
	}
	names, err := Register(reg, "gh", Light(2000))
	if err != nil {
		t.Fatal(err)
	}
	if reg.Snapshot().Len() != 2000 || len(names) != 2000 {
		t.Errorf("%d tools served of %d", reg.Snapshot().Len(), len(names))
	}
	if owner, _ := reg.Owner(names[0]); owner != "openapi:gh" {
		t.Errorf("owner %q", owner)
	}
	if diff := cmp.Diff(Tools(50)[7].Description, Tools(50)[7].Description); diff != "" || Tools(50)[7].Name == Tools(51)[7].Name && Tools(50)[7].Description == Tools(51)[7].Description {
		t.Errorf("not deterministic per n, or the same for another n")
	}
	// Light's declarations are as large as the full ones.
	full, light := Tools(100), Light(100)
	var fb, lb int
	for i := range full {
		fb += len(full[i].Description) + len(full[i].InputSchema) + len(full[i].OutputSchema)
		lb += len(light[i].Description) + len(light[i].InputSchema)
	}
	if lb < fb || lb > fb+fb/10 {
		t.Errorf("light %d bytes, full %d", lb, fb)
	}
	if _, err := tools.NewRegistry(full[:20]...); err != nil {
		t.Errorf("the full tools: %v", err)
	}
}
