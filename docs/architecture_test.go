package docs

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/toolwire/toolwire/"

// importRule is one row of architecture.md's import rules: the packages it
// covers and the import paths they must not name.
type importRule struct {
	packages  string
	forbidden []string
}

// TestImportRules checks every non-test Go file of the module against the
// import rules architecture.md states, so the page stays the rules.
func TestImportRules(t *testing.T) {
	t.Parallel()
	rules := readImportRules(t, "architecture.md")
	if len(rules) < 5 {
		t.Fatalf("architecture.md states %d import rules; the table was not found", len(rules))
	}
	imports := moduleImports(t, "..")
	for _, r := range rules {
		covered := 0
		for pkg, paths := range imports {
			if !matches(r.packages, pkg) {
				continue
			}
			covered++
			for _, p := range paths {
				for _, f := range r.forbidden {
					if matches(f, p) {
						t.Errorf("%s imports %s; architecture.md: %s must not import %s", pkg, p, r.packages, f)
					}
				}
			}
		}
		if covered == 0 {
			t.Errorf("the rule for %s covers no package: fix the table", r.packages)
		}
	}
}

// TestImportRulesCatchBreaks checks the checker on a rule it must report.
func TestImportRulesCatchBreaks(t *testing.T) {
	t.Parallel()
	imports := moduleImports(t, "..")
	found := false
	for _, p := range imports[module+"service/grpcserve"] {
		if matches("engine/...", p) {
			found = true
		}
	}
	if !found {
		t.Fatal("service/grpcserve's imports do not include engine: the walk is broken")
	}
	if !matches("google.golang.org/grpc/...", "google.golang.org/grpc/codes") || matches("engine/...", module+"enginex") {
		t.Fatal("matches is broken")
	}
}

// readImportRules parses the table under "## Import rules".
func readImportRules(t *testing.T, page string) []importRule {
	t.Helper()
	b, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## Import rules\n")
	if !ok {
		t.Fatalf("%s has no Import rules section", page)
	}
	code := regexp.MustCompile("`([^`]+)`")
	var rules []importRule
	for line := range strings.Lines(section) {
		cells := strings.Split(strings.TrimSpace(line), "|")
		if len(cells) != 4 || !strings.Contains(cells[1], "`") {
			continue
		}
		pkg := code.FindStringSubmatch(cells[1])
		r := importRule{packages: pkg[1]}
		for _, m := range code.FindAllStringSubmatch(cells[2], -1) {
			r.forbidden = append(r.forbidden, m[1])
		}
		rules = append(rules, r)
	}
	return rules
}

// matches reports whether pattern (a package from the module's root, or a
// full path when its first element has a dot; a trailing /... takes in
// subpackages) names the import path p.
func matches(pattern, p string) bool {
	full := pattern
	if first, _, _ := strings.Cut(pattern, "/"); !strings.Contains(first, ".") {
		full = module + pattern
	}
	if base, ok := strings.CutSuffix(full, "/..."); ok {
		return p == base || strings.HasPrefix(p, base+"/")
	}
	return p == full
}

// moduleImports returns each package's imports, from its non-test files.
func moduleImports(t *testing.T, root string) map[string][]string {
	t.Helper()
	imports := map[string][]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case "node_modules", "testdata", ".git":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, filepath.Dir(path))
		if err != nil {
			return err
		}
		pkg := strings.TrimSuffix(module+filepath.ToSlash(rel), "/.")
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			imports[pkg] = append(imports[pkg], p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return imports
}
