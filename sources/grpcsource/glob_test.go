package grpcsource

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/toolwire/toolwire/sources/internal/sourcetest"
	"google.golang.org/protobuf/reflect/protoreflect"
)

func TestGlob(t *testing.T) {
	t.Parallel()
	const (
		eval  = "google.api.expr.conformance.v1alpha1.ConformanceService/Eval"
		check = "grpc.health.v1.Health/Check"
		list  = "shop.v1.Items/ListItems"
	)
	for _, tc := range []struct {
		pattern string
		matches []string // of eval, check, list
	}{
		{"google.api.expr.**", []string{eval}},
		{"google.api.expr.*", []string{eval}}, // its service's name has no "/"
		{"google.api.*/Eval", []string{eval}},
		{"**/Eval", []string{eval}},
		{"**", []string{eval, check, list}},
		{"**Check", []string{check}}, // across the "/"
		{"*Check", nil},              // not across it
		{"grpc.health.**Check", []string{check}},
		{"*", []string{eval, check, list}}, // every service's name
		{"*/*", []string{eval, check, list}},
		{"grpc.health.v1.Health", []string{check}},
		{"/grpc.health.v1.Health/Check", []string{check}},
		{"grpc.health.v1.Health/*", []string{check}},
		{"grpc.health.v1.Health/C?eck", []string{check}},
		{"grpc.health.v1.Health/[A-D]*", []string{check}},
		{"grpc.health.v1.Health/[!A-D]*", nil},
		{"**/{Check,Eval}", []string{eval, check}},
		{"{shop,grpc}.**/{List*,Nope}", []string{list}},
		{"**/List*", []string{list}},
		{"*/List*", []string{list}},
		{"shop.v1.Items/List", nil},
		{"grpc.health.v1.Health/Check/**", nil},
		{"grpc.health.v1", nil},
		{"grpc.health.v1.**", []string{check}},
		{`grpc.health.v1.Health/Chec\k`, []string{check}},
		{"grpc.health.v1.Health/Check.", nil}, // "." is itself
	} {
		var got []string
		for _, full := range []string{eval, check, list} {
			svc, _, _ := strings.Cut(full, "/")
			c := Config{Include: []string{tc.pattern}}
			if c.selector().selects(protoreflect.FullName(svc), full) {
				got = append(got, full)
			}
		}
		if diff := cmp.Diff(tc.matches, got); diff != "" {
			t.Errorf("%q (-want +got):\n%s", tc.pattern, diff)
		}
	}
	for _, bad := range []string{"a/[b", "{a,b", "a}", `a\`, "[]"} {
		if err := (Config{Name: "a", Target: "h:1", Exclude: []string{bad}}).Validate(); err == nil || !strings.Contains(err.Error(), "not a valid glob") {
			t.Errorf("pattern %q: %v", bad, err)
		}
	}
}

// TestGlobsOnARealServer: the documented exclude of CEL's services
// excludes them, and patterns that match nothing are logged.
func TestGlobsOnARealServer(t *testing.T) {
	t.Parallel()
	addr, _ := startServices(t)
	s, reg, logs := newServices(t)
	cfg := Config{Name: "g", Target: addr, Insecure: true,
		Include: []string{"grpc.health.v1.Health", "google.api.expr.**", "grpc.testing.TestService/EmptyCall", "grpc.health.v2.**"},
		Exclude: []string{"google.api.expr.**", "**/Watch", "**/Delete*"}}
	if err := s.Sync(t.Context(), []Config{cfg}); err != nil {
		t.Fatal(err)
	}
	snap := sourcetest.WaitTools(t, reg, "the health tools", sourcetest.Has("g_Health_Check"))
	if diff := cmp.Diff([]string{"g_Health_Check", "g_Health_List", "g_TestService_EmptyCall"}, snap.Names()); diff != "" {
		t.Errorf("tools (-want +got):\n%s", diff)
	}
	lines := logs.String()
	for _, want := range []string{
		`"msg":"gRPC include pattern matches no method of the server","grpc":"g"`,
		`"pattern":"grpc.health.v2.**"`,
		`"msg":"gRPC exclude pattern matches no method of the server","grpc":"g"`,
		`"pattern":"**/Delete*"`,
	} {
		if !strings.Contains(lines, want) {
			t.Errorf("the log lacks %s:\n%s", want, lines)
		}
	}
	for _, matched := range []string{`"pattern":"google.api.expr.**"`, `"pattern":"**/Watch"`, `"pattern":"grpc.health.v1.Health"`} {
		if strings.Contains(lines, matched) {
			t.Errorf("a pattern that matched is logged as matching nothing (%s):\n%s", matched, lines)
		}
	}
	if !slices.ContainsFunc(strings.Split(lines, "\n"), func(l string) bool {
		return strings.Contains(l, `"pattern":"grpc.health.v2.**"`) && strings.Contains(l, `grpc.health.v1.Health`) && strings.Contains(l, `grpc.testing.TestService`)
	}) {
		t.Errorf("the line of a pattern that matched nothing does not list the server's services:\n%s", lines)
	}
}
