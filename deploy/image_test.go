package deploy

import (
	"debug/buildinfo"
	"debug/elf"
	"errors"
	"os"
	"regexp"
	"strings"
	"testing"
)

// No container engine runs where the tests do, so the image itself is not
// built here. This test holds the Dockerfile to its promises instead: it
// builds cmd/toolwire with the Dockerfile's own go build flags and checks
// the result is a static binary that runs on distroless/static (or scratch).

// dockerfileBuild returns the Dockerfile's RUN instruction that builds
// toolwire, continuation lines joined.
func dockerfileBuild(t *testing.T) (run string, final []string) {
	t.Helper()
	b, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	text := strings.ReplaceAll(string(b), "\\\n", " ")
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "FROM "):
			final = []string{line} // the last stage is the image
		case strings.HasPrefix(line, "RUN ") && strings.Contains(line, "go build"):
			run = line
		case final != nil && line != "" && !strings.HasPrefix(line, "#"):
			final = append(final, line)
		}
	}
	if run == "" {
		t.Fatal("Dockerfile: no RUN … go build instruction")
	}
	return run, final
}

func TestDockerfile(t *testing.T) {
	t.Parallel()
	run, final := dockerfileBuild(t)
	for _, want := range []string{"CGO_ENABLED=0", "-trimpath", `-ldflags="-s -w"`, "./cmd/toolwire"} {
		if !strings.Contains(run, want) {
			t.Errorf("the build instruction lacks %s: %s", want, run)
		}
	}
	image := strings.Join(final, "\n")
	if !regexp.MustCompile(`(?m)^FROM (gcr\.io/distroless/static[^ ]*:nonroot|scratch)\b`).MatchString(image) {
		t.Errorf("the final stage is not distroless/static:nonroot or scratch:\n%s", image)
	}
	for _, want := range []string{"USER 65532:65532", `ENTRYPOINT ["/usr/local/bin/toolwire"]`, `CMD ["serve"`} {
		if !strings.Contains(image, want) {
			t.Errorf("the final stage lacks %s:\n%s", want, image)
		}
	}
}

func TestImageBinaryIsStatic(t *testing.T) {
	t.Parallel()
	run, _ := dockerfileBuild(t)
	if !strings.Contains(run, `CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/toolwire ./cmd/toolwire`) {
		t.Fatalf("the Dockerfile's build changed; update this test's copy of it: %s", run)
	}
	bin := imageBinary(t)

	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("the binary names a dynamic loader (PT_INTERP): it would not start on distroless/static")
		}
	}
	if libs, err := f.ImportedLibraries(); err != nil || len(libs) > 0 {
		t.Errorf("the binary needs shared libraries %q (%v)", libs, err)
	}
	if _, err := f.Symbols(); !errors.Is(err, elf.ErrNoSymbols) {
		t.Errorf("the binary has a symbol table (want none with -s): %v", err)
	}

	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	// (With -trimpath Go does not record -ldflags; the symbol check above
	// stands for -s.)
	for key, want := range map[string]string{"CGO_ENABLED": "0", "-trimpath": "true"} {
		if got := settings[key]; got != want {
			t.Errorf("build setting %s = %q, want %q", key, got, want)
		}
	}
	if info.Path != "github.com/toolwire/toolwire/cmd/toolwire" {
		t.Errorf("main package = %q", info.Path)
	}
}
