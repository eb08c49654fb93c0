package sources

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestImportRules keeps the rules the package comments state: nothing under
// sources/ imports service/ or cmd/, and sources/reload imports no gRPC.
func TestImportRules(t *testing.T) {
	t.Parallel()
	const mod = "github.com/toolwire/toolwire/"
	checked := 0
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		checked++
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if strings.HasPrefix(p, mod+"service") || strings.HasPrefix(p, mod+"cmd/") {
				t.Errorf("%s imports %s: sources must reach the server only through the registry", path, p)
			}
			if filepath.Dir(path) == "reload" && (strings.HasPrefix(p, "google.golang.org/grpc") || strings.HasPrefix(p, mod+"gen/")) {
				t.Errorf("%s imports %s: reload must not import gRPC", path, p)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 10 {
		t.Errorf("checked %d files; the walk missed the packages", checked)
	}
}
