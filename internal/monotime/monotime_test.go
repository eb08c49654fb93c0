package monotime

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestNow(t *testing.T) {
	a := Now()
	time.Sleep(time.Millisecond)
	if b := Now(); a == 0 || b <= a {
		t.Errorf("Now() = %d then %d; want nonzero and increasing", a, b)
	}
	if d := Since(a); d < time.Millisecond {
		t.Errorf("Since = %v after a 1ms sleep", d)
	}
}

// TestNoWallClockDurations holds the class: no package keeps
// time.Now().UnixNano() (or UnixMilli, UnixMicro, Unix) to measure a
// duration within the process, where a step of the wall clock passes for
// time spent (the engine's send watchdog ended every stream under way on
// a step forward past send_timeout). The stores keep wall instants on
// purpose (leases and TTLs shared by processes), as do the benchmarks and
// test helpers that mint tokens.
func TestNoWallClockDurations(t *testing.T) {
	root := filepath.Join("..", "..")
	allowed := []string{"store/", "bench/", "internal/testing/", "gen/", "clients/"}
	fset := token.NewFileSet()
	files := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if path != root && strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "node_modules" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") {
			return nil
		}
		for _, a := range allowed {
			if strings.HasPrefix(rel, a) {
				return nil
			}
		}
		files++
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || !strings.HasPrefix(sel.Sel.Name, "Unix") {
				return true
			}
			if inner, ok := sel.X.(*ast.CallExpr); ok {
				if s, ok := inner.Fun.(*ast.SelectorExpr); ok && s.Sel.Name == "Now" {
					if id, ok := s.X.(*ast.Ident); ok && id.Name == "time" {
						t.Errorf("%s: time.Now().%s(): a wall clock instant kept as a number; measure durations within the process with monotime.Now", fset.Position(call.Pos()), sel.Sel.Name)
					}
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files == 0 {
		t.Fatal("the walk found no Go files: it is broken")
	}
}
