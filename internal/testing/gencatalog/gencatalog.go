// Package gencatalog makes large catalogs of tools shaped like a real API's
// operations (GitHub's REST API as OpenAPI tools: a resource and a verb in
// the name, a title, a paragraph of description, an input schema of a
// dozen described parameters), for the tests and benchmarks of listing and
// searching thousands of tools. The same n always gives the same catalog,
// of about 4.5 KB of declaration per tool (GitHub's 1,219 tools are 5.4 MB
// as a ListToolsResponse), which gzip shrinks about as much as real
// schemas and prose.
package gencatalog

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/toolwire/toolwire/tools"
)

var (
	resources = []string{"repos", "issues", "pulls", "actions", "orgs", "users", "teams", "gists", "checks", "releases",
		"projects", "packages", "billing", "secrets", "codespaces", "dependabot", "deployments", "environments", "hooks", "commits",
		"branches", "labels", "milestones", "reactions", "search", "migrations", "licenses", "markdown", "meta", "interactions"}
	verbs    = []string{"get", "list", "create", "update", "delete", "add", "remove", "set", "check", "download", "enable", "disable", "rerun", "cancel", "merge", "transfer"}
	nouns    = []string{"repository", "issue", "pull request", "workflow run", "organization", "user", "team", "gist", "check suite", "release", "project", "package", "secret", "codespace", "alert", "deployment", "environment", "webhook", "commit", "branch", "label", "milestone", "reaction", "artifact", "runner", "job", "comment", "review", "invitation", "key"}
	words    = strings.Fields("the a an of to for in on with by from and or if when that this which is are be can may must only not all any each every its their your you authenticated token scope permission access write read admin public private internal visible returned response request endpoint parameter value default maximum minimum number results page per sort direction ascending descending created updated pushed full name owner account installation app fine-grained classic personal OAuth GitHub Enterprise Cloud Server API version header media type preview feature deprecated available listed specified given provided required optional status state open closed merged draft locked archived disabled enabled")
	types    = []string{"string", "integer", "boolean", "string", "string", "integer"}
	formats  = []string{"", "", "date-time", "uri", "email", ""}
	schemaKW = []string{"owner", "repo", "org", "username", "per_page", "page", "sort", "direction", "since", "before", "state", "labels", "assignee", "creator", "mentioned", "milestone", "head", "base", "title", "body", "draft", "maintainer_can_modify", "issue_number", "pull_number", "ref", "sha", "path", "name", "visibility", "affiliation"}
)

// Tools returns n tools with names unique in the catalog, each shaped as
// the package says, as the source "openapi:<owner>" would serve them.
func Tools(n int) []tools.Tool {
	rng := rand.New(rand.NewPCG(uint64(n), 31))
	ts := make([]tools.Tool, n)
	for i := range ts {
		res, verb, noun := pick(rng, resources), pick(rng, verbs), pick(rng, nouns)
		ts[i] = tools.Tool{
			Name:        fmt.Sprintf("%s_%s_%s_%d", res, verb, strings.ReplaceAll(noun, " ", "_"), i),
			Title:       fmt.Sprintf("%s a %s", strings.ToUpper(verb[:1])+verb[1:], noun),
			Description: description(rng, verb, noun),
			InputSchema: objectSchema(rng, 10+rng.IntN(14)),
			Annotations: tools.Annotations{ReadOnly: verb == "get" || verb == "list" || verb == "check" || verb == "download", OpenWorld: true},
			Source:      tools.SourceHTTP,
			Handler:     func(context.Context, *tools.Call) (*tools.Result, error) { return &tools.Result{}, nil },
		}
		if rng.IntN(2) == 0 {
			ts[i].OutputSchema = objectSchema(rng, 8+rng.IntN(12))
		}
	}
	return ts
}

// Light returns the tools of Tools(n) with their schemas folded into their
// descriptions: declarations of the same size, as gzip shrinks them, that
// a registry takes a hundred times faster, since it has no schema but an
// empty object's to compile (about 3 ms per tool otherwise): for tests.
func Light(n int) []tools.Tool {
	ts := Tools(n)
	for i := range ts {
		t := &ts[i]
		t.Description += "\n\nParameters: " + string(t.InputSchema)
		if t.OutputSchema != nil {
			t.Description += "\n\nResult: " + string(t.OutputSchema)
		}
		t.InputSchema, t.OutputSchema = nil, nil
	}
	return ts
}

// Register serves ts in reg as the source "openapi:<owner>", and returns
// their names.
func Register(reg *tools.Registry, owner string, ts []tools.Tool) ([]string, error) {
	if _, err := reg.Source("openapi:" + owner).Set(ts...); err != nil {
		return nil, err
	}
	names := make([]string, len(ts))
	for i, t := range ts {
		names[i] = t.Name
	}
	return names, nil
}

func pick[T any](rng *rand.Rand, from []T) T { return from[rng.IntN(len(from))] }

// sentence is n words of prose.
func sentence(rng *rand.Rand, n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(pick(rng, words))
	}
	s := b.String()
	return strings.ToUpper(s[:1]) + s[1:] + "."
}

func description(rng *rand.Rand, verb, noun string) string {
	parts := []string{fmt.Sprintf("%ss a %s.", strings.ToUpper(verb[:1])+verb[1:], noun)}
	for range 4 + rng.IntN(7) {
		parts = append(parts, sentence(rng, 8+rng.IntN(12)))
	}
	parts = append(parts, fmt.Sprintf("OAuth app tokens and personal access tokens (classic) need the `repo` scope to use this endpoint with a private %s.", noun))
	return strings.Join(parts, " ")
}

// objectSchema is the schema of an object of about n described properties.
func objectSchema(rng *rand.Rand, n int) json.RawMessage {
	props := map[string]any{}
	var required []string
	for range n {
		name := pick(rng, schemaKW)
		p := map[string]any{"type": pick(rng, types), "description": sentence(rng, 10+rng.IntN(20))}
		switch p["type"] {
		case "string":
			if f := pick(rng, formats); f != "" {
				p["format"] = f
			} else if rng.IntN(3) == 0 {
				p["enum"] = []string{"all", "open", "closed", "created", "updated"}[:2+rng.IntN(3)]
			}
		case "integer":
			p["minimum"], p["maximum"], p["default"] = 1, 100, 30
		}
		props[name] = p
		if rng.IntN(4) == 0 {
			required = append(required, name)
		}
	}
	s := map[string]any{"type": "object", "properties": props, "additionalProperties": false}
	if len(required) > 0 {
		s["required"] = dedupe(required)
	}
	b, _ := json.Marshal(s)
	return b
}

func dedupe(s []string) []string {
	seen := map[string]bool{}
	out := s[:0]
	for _, v := range s {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}
