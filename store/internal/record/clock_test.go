package record

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestClock(t *testing.T) {
	c := NewClock()
	a := c.Now()
	time.Sleep(time.Millisecond)
	b := c.Now()
	if d := b.Sub(a); d < time.Millisecond {
		t.Errorf("Clock advanced %v over a 1ms sleep", d)
	}
	if wall := time.Unix(0, b.UnixNano()).Sub(time.Unix(0, a.UnixNano())); wall != b.Sub(a) {
		t.Errorf("the Unix times of the clock advanced %v, its monotonic reading %v; want them equal", wall, b.Sub(a))
	}
}

// TestStoresReadTheirClock holds the class: the stores that keep leases
// and TTLs themselves (memory, bolt, and this package) read the time only
// through a Clock, never time.Now, whose steps a lease would take for time
// spent (a step of 10 s forward, and every key in flight was taken over by
// its retry, running the call twice).
func TestStoresReadTheirClock(t *testing.T) {
	fset := token.NewFileSet()
	files := 0
	for _, dir := range []string{".", filepath.Join("..", "..", "memory"), filepath.Join("..", "..", "bolt")} {
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
				continue
			}
			files++
			f, err := parser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, decl := range f.Decls {
				if fn, ok := decl.(*ast.FuncDecl); ok && fn.Name.Name == "NewClock" {
					continue // the one reading of the wall clock
				}
				ast.Inspect(decl, func(n ast.Node) bool {
					if s, ok := n.(*ast.SelectorExpr); ok && s.Sel.Name == "Now" {
						if id, ok := s.X.(*ast.Ident); ok && id.Name == "time" {
							t.Errorf("%s: time.Now: read the store's Clock", fset.Position(s.Pos()))
						}
					}
					return true
				})
			}
		}
	}
	if files < 5 {
		t.Fatalf("read %d files: the walk is broken", files)
	}
}
