package openapi

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"

	httpsource "github.com/toolwire/toolwire/sources/httpsource"
	"github.com/toolwire/toolwire/sources/internal/listing"
	"github.com/toolwire/toolwire/sources/internal/toolname"
	"github.com/toolwire/toolwire/tools"
)

// param is one parameter an operation sends, and its argument.
type param struct {
	paramSpec
	prop string // its property in the input schema
}

// bodyMode says how an operation's body is made from the arguments.
type bodyMode int

const (
	noBody      bodyMode = iota
	mergedBody           // the body's properties sit beside the parameters
	wrappedBody          // the body is the argument named bodyProp
)

// operation runs the calls of one operation's tool.
type operation struct {
	method, path string   // path as the document writes it, with {name}s, up to any ? or #
	query        []string // the pairs written after a ? in the path, escaped, sent first
	base         string
	params       []param
	body         bodyMode
	bodyProp     string
	bodyMembers  map[string]bool // a merged body's properties: only they are sent
	bodySpec     *bodySpec
	structured   bool // the tool declares an output schema
	send         *httpsource.Sender
}

// skipped is an operation that gives no tool: its route, the kind of
// reason (for the summary) and the reason.
type skipped struct {
	route, reason, detail string
}

// report is what one load made of a document, for its summary line.
type report struct {
	operations int       // in the document
	excluded   int       // not selected by include and exclude
	tools      int       // made
	skips      []skipped // the rest
	unmatched  []string  // "include PATTERN" or "exclude PATTERN" that matched no operation
	leftOut    []skipped // optional parameters the tools do not offer, and why
	cut        error     // why the tools stop short of the listing's bounds, if they do
	cutOff     int       // selected operations left out by the cut
}

// build returns the tools of doc's operations that c selects, sorted by
// path and method, and what became of the others. An operation that
// cannot be a correct tool is skipped (report.skips); the error is for
// what is wrong with c itself.
//
// The tools are held to bounds (listing.Default) as an MCP server's
// listing is: an input schema is bounded, but every operation naming one
// large request body writes it out again and declares it again, so a
// 690 KB document of 4000 operations naming one 98 KB schema took 15 s of
// CPU and declared 394 MB. Past a bound the operations left are cut
// (report.cut) and the tools before the cut offered.
func build(c Config, d *document, send *httpsource.Sender, bounds listing.Bounds) ([]tools.Tool, *report, error) {
	rep := &report{}
	ops, bad := d.operations()
	var routes [][2]string // every operation's id (or "") and route, for the patterns that match none
	for _, b := range bad {
		rep.operations++
		_, path, _ := strings.Cut(b.route, " ")
		for _, m := range methods {
			routes = append(routes, [2]string{"", strings.ToUpper(m) + " " + path})
		}
		if selectsAny(c, path) {
			rep.skips = append(rep.skips, b)
		} else {
			rep.excluded++
		}
	}
	used := map[string]bool{} // override keys that matched an operation
	taken := map[string]bool{}
	out := []tools.Tool{}
	defs := newDefs(d)
	b := &builder{c: c, d: d, send: send, defs: defs, schemas: &tools.SchemaCache{DeferOutput: true}}
	l := listing.Listing{Max: bounds}
	for _, r := range ops {
		rep.operations++
		routes = append(routes, [2]string{r.id, r.route()})
		if !c.selects(r.id, r.route()) {
			rep.excluded++
			continue
		}
		ov, hasOv := c.Operations[r.id]
		if hasOv && r.id != "" {
			used[r.id] = true
		} else if ov, hasOv = c.Operations[r.route()]; hasOv {
			used[r.route()] = true
		}
		if l.Cut != nil || !l.Tool() {
			rep.cutOff++
			continue
		}
		t, err := b.tool(r, ov, taken)
		rep.leftOut = append(rep.leftOut, b.leftOut...)
		b.leftOut = nil
		if err != nil {
			var se *skipError
			if errors.As(err, &se) {
				rep.skips = append(rep.skips, skipped{r.route(), se.reason, se.Error()})
				continue
			}
			return nil, nil, err
		}
		if !l.Keep(t) {
			rep.cutOff++
			continue
		}
		taken[t.Name] = true
		out = append(out, t)
	}
	rep.cut = l.Cut
	for _, k := range slices.Sorted(maps.Keys(c.Operations)) {
		if !used[k] {
			return nil, nil, fmt.Errorf("operations %q: no selected operation has this operationId or METHOD /path", k)
		}
	}
	rep.tools = len(out)
	rep.unmatched = unmatched(c, routes)
	return out, rep, nil
}

// unmatched returns the patterns of c's include and exclude that match
// none of routes (each an operationId, or "", and a "METHOD /path"): a
// misspelt operationId (getPetByID) would otherwise include nothing, or
// exclude nothing, without a word.
func unmatched(c Config, routes [][2]string) []string {
	var out []string
	for _, l := range []struct {
		name     string
		patterns []string
	}{{"include", c.Include}, {"exclude", c.Exclude}} {
		for _, p := range l.patterns {
			if !slices.ContainsFunc(routes, func(r [2]string) bool { return c.matches(p, r[0], r[1]) }) {
				out = append(out, l.name+" "+p)
			}
		}
	}
	return out
}

// selectsAny reports whether c selects an operation of path by some
// method: a path item that cannot be read is counted against c's
// selection without knowing its methods.
func selectsAny(c Config, path string) bool {
	for _, m := range methods {
		if c.selects("", strings.ToUpper(m)+" "+path) {
			return true
		}
	}
	return false
}

// builder makes the tools of one load of a document.
type builder struct {
	c       Config
	d       *document
	send    *httpsource.Sender
	defs    *defs
	schemas *tools.SchemaCache           // one load's compiled schemas, shared by its tools
	leftOut []skipped                    // the last tool's optional parameters it does not offer
	texts   map[[32]byte]json.RawMessage // input schemas made, by their SHA-256

	base    string // the document's server, once asked for
	baseErr error
	baseSet bool
}

// intern returns the input schema text made already that equals text, or
// text.
func (b *builder) intern(text json.RawMessage) json.RawMessage {
	key := sha256.Sum256(text)
	if t, ok := b.texts[key]; ok {
		return t
	}
	if b.texts == nil {
		b.texts = map[[32]byte]json.RawMessage{}
	}
	b.texts[key] = text
	return text
}

// docBase is where requests go unless an operation names its own server.
func (b *builder) docBase() (string, error) {
	if !b.baseSet {
		b.base, b.baseErr = baseURL(b.c, b.d)
		b.baseSet = true
	}
	return b.base, b.baseErr
}

// tool makes the tool of one operation. A skipError says why it cannot
// be one.
func (b *builder) tool(r opRef, ov Override, taken map[string]bool) (t tools.Tool, err error) {
	spec, err := b.d.spec(r)
	if err != nil {
		return t, err
	}
	path, query, bound, err := splitPath(r.path)
	if err != nil {
		return t, err
	}
	o := &operation{method: r.method, path: path, query: query, send: b.send}
	if spec.servers != nil && !b.ownsServers(spec.servers) {
		if o.base, err = b.opBase(spec.servers); err != nil {
			return t, skip(reasonServer, "servers: %v", err)
		}
	} else if o.base, err = b.docBase(); err != nil {
		return t, err // the entry's problem: the document names no usable server
	}
	// The path's placeholders and the parameters kept, as sets: a search
	// of the path per parameter and of the parameters per placeholder
	// made 40,000 path parameters (a 3.6 MB document) take 5 s of CPU.
	placeholders := map[string]bool{}
	for _, m := range pathParamRE.FindAllStringSubmatch(path, -1) {
		placeholders[m[1]] = true
	}
	var params []paramSpec
	seen, kept := map[string]bool{}, map[string]bool{} // by "in:name"
	for _, p := range spec.params {
		if p.name == "" {
			// Optional, or reading it would have failed: it cannot be
			// sent, and the operation is a tool without it (Notion's
			// "Retrieve a page" declares a header with no name).
			b.leftOut = append(b.leftOut, skipped{r.route(), reasonDocument, fmt.Sprintf("an optional %s parameter has no name", p.in)})
			continue
		}
		if key, ok := bound[p.name]; ok && (p.in == "path" || p.in == "query") {
			// A pair of the path's own query (/current?city={city}) is
			// sent as a query parameter, in whichever place the
			// document declares it.
			if p.in == "path" {
				p.style, p.explode = "form", true
			}
			p.in, p.name = "query", key
		}
		if seen[p.in+":"+p.name] {
			continue
		}
		seen[p.in+":"+p.name] = true
		if p.in == "cookie" {
			if p.required {
				return t, skip(reasonCookie, "parameter %q is sent in a cookie, which toolwire does not send", p.name)
			}
			continue
		}
		if p.in == "header" && !validHeaderName(p.name) {
			return t, skip(reasonDocument, "header parameter %q: not a valid header name", p.name)
		}
		if p.in == "path" && !placeholders[p.name] {
			continue // a path parameter the path does not use sends nothing
		}
		if err := b.d.checkStyle(p); err != nil {
			// An optional parameter no request can carry is left out, as
			// an optional cookie is: the operation is a tool without it
			// (EC2's DescribeInstances without its Filter, whose
			// objects form style cannot write).
			if !p.required {
				b.leftOut = append(b.leftOut, skipped{r.route(), reasonStyle, err.Error()})
				continue
			}
			return t, err
		}
		params = append(params, p)
		kept[p.in+":"+p.name] = true
	}
	for _, m := range pathParamRE.FindAllStringSubmatch(path, -1) {
		if !kept["path:"+m[1]] {
			return t, skip(reasonDocument, "path parameter {%s} is not declared", m[1])
		}
	}
	for _, name := range slices.Sorted(maps.Keys(bound)) {
		key := bound[name]
		if !kept["query:"+key] {
			return t, skip(reasonDocument, "the path's query pair %s={%s}: no parameter %q is declared", key, name, name)
		}
	}
	if rb := spec.body; rb != nil && rb.kind == bodyForm {
		if types := typeList(b.d.deref(rb.schema)["type"]); len(types) > 0 && !slices.Contains(types, "object") {
			return t, skip(reasonBody, "the form body's schema is not an object")
		}
	}
	inJSON, err := fitDepth(func(depth int) (json.RawMessage, int, error) {
		return o.inputSchema(b.d, params, spec.body, depth)
	})
	if err != nil {
		return t, err
	}
	// Operations that take the same arguments share one text (one
	// allocation, however many tools hold it).
	inJSON = b.intern(inJSON)
	var outJSON json.RawMessage
	if spec.output != nil {
		if s, ok := b.defs.responseSchema(spec.output); ok {
			outJSON, o.structured = s, true
		}
	}

	readOnly := r.method == http.MethodGet || r.method == http.MethodHead
	if ov.ReadOnly != nil {
		readOnly = *ov.ReadOnly
	}
	desc := ov.Description
	if desc == "" {
		desc = strings.TrimSpace(spec.summary)
		if d := strings.TrimSpace(spec.description); d != "" && d != desc {
			if desc != "" {
				desc += "\n\n"
			}
			desc += d
		}
		if desc == "" {
			desc = r.route()
		}
		if spec.deprecated {
			desc = "Deprecated. " + desc
		}
	}
	baseName := r.id
	if baseName == "" {
		baseName = strings.ToLower(r.method) + strings.NewReplacer("/", "_", "{", "", "}", "").Replace(r.path)
	}
	t = tools.Tool{
		Name:         toolname.Make(b.c.Name, baseName, r.route(), taken),
		Description:  desc,
		InputSchema:  inJSON,
		OutputSchema: outJSON,
		Annotations: tools.Annotations{
			ReadOnly:    readOnly,
			Idempotent:  r.method != http.MethodPost && r.method != http.MethodPatch,
			Destructive: r.method == http.MethodDelete,
			OpenWorld:   true,
		},
		Timeout: ov.Timeout,
		Source:  tools.SourceHTTP,
		Handler: o.call,
	}
	// The input schema is compiled here, once: one that does not compile
	// skips this operation, not the document. Output schemas are compiled
	// when a call's result is first checked against them: thousands of
	// tools, most never called, would otherwise cost seconds per load.
	compiled, err := b.schemas.Compile(t)
	if err != nil {
		return t, skip(reasonSchema, "%v", err)
	}
	return compiled, nil
}

// fitDepth makes an input schema with build, nesting cut past maxDepth,
// and while it is larger than maxInputBytes makes it again with its
// nesting cut two levels shallower, down to minDepth. build reports the
// deepest level the schema reaches (maxDepth when it was cut by the
// number of its schemas instead): a cut at or below that level makes the
// same schema again, so those depths are passed over, and a schema too
// large with no nesting left to cut (hundreds of properties side by side)
// is made once, not once for every depth down to minDepth.
func fitDepth(build func(depth int) (json.RawMessage, int, error)) (json.RawMessage, error) {
	for depth := maxDepth; ; {
		in, deepest, err := build(max(depth, minDepth))
		if err != nil || len(in) <= maxInputBytes || depth <= minDepth || deepest <= minDepth {
			return in, err
		}
		for depth -= 2; depth >= deepest && depth > minDepth; depth -= 2 {
		}
	}
}

// inputSchema makes the input schema of an operation's parameters and
// body, nesting cut past maxDepth, and sets how o sends them.
func (o *operation) inputSchema(d *document, params []paramSpec, rb *bodySpec, maxDepth int) (_ json.RawMessage, deepest int, _ error) {
	conv := d.requestConverter(maxDepth)
	props := map[string]any{}
	var required []string
	o.params, o.body, o.bodyProp, o.bodySpec, o.bodyMembers = nil, noBody, "", nil, nil
	if rb != nil {
		// What a call needs of the body, not its schema: the tool keeps
		// no part of the document.
		o.bodySpec = &bodySpec{kind: rb.kind, contentType: rb.contentType, required: rb.required, encoding: rb.encoding}
	}
	// Names the document gives that are valid arguments are taken first:
	// filter_name stays itself beside filter[name].
	names, taken := make([]string, len(params)), argNames{taken: map[string]bool{}, next: map[string]int{}}
	for _, valid := range []bool{true, false} {
		for i, p := range params {
			if argNameRE.MatchString(p.name) == valid {
				names[i] = taken.name(p.name, p.in)
			}
		}
	}
	for i, p := range params {
		prop := names[i]
		s := conv.schema(p.schema, 0)
		if sm, ok := s.(map[string]any); ok && (p.deprecated || (sm["description"] == nil && p.description != "")) {
			sm = maps.Clone(sm)
			if sm["description"] == nil && p.description != "" {
				sm["description"] = p.description
			}
			if p.deprecated {
				sm["deprecated"] = true
			}
			s = sm
		}
		if sm, ok := s.(map[string]any); ok && prop != p.name {
			// Twilio's StartTime< and StartTime> are StartTime_query and
			// StartTime_query_2 beside StartTime: say which is which.
			sm = maps.Clone(sm)
			note := fmt.Sprintf("Sent as the %s parameter %q.", p.in, p.name)
			if d, _ := sm["description"].(string); d != "" {
				note = d + "\n\n" + note
			}
			sm["description"] = note
			s = sm
		}
		props[prop] = s
		if p.required {
			required = append(required, prop)
		}
		kept := p
		kept.schema, kept.description = nil, ""
		o.params = append(o.params, param{paramSpec: kept, prop: prop})
	}
	if rb != nil {
		s := conv.schema(rb.schema, 0)
		sm, _ := s.(map[string]any)
		members, _ := sm["properties"].(map[string]any)
		switch {
		case len(members) == 0 && sm["additionalProperties"] == false && sm["type"] == "object":
			// An object of no members (Stripe's GETs declare one): there
			// is nothing to send, and no argument to offer.
			o.bodySpec = nil
		case mergeable(sm, props):
			o.body = mergedBody
			o.bodyMembers = map[string]bool{}
			for k, v := range sm["properties"].(map[string]any) {
				props[k] = v
				o.bodyMembers[k] = true
			}
			if req, ok := sm["required"].([]string); ok && rb.required {
				required = append(required, req...)
			}
		default:
			o.body, o.bodyProp = wrappedBody, "body"
			for props[o.bodyProp] != nil {
				o.bodyProp += "_"
			}
			if sm != nil && sm["description"] == nil && rb.description != "" {
				sm = maps.Clone(sm)
				sm["description"] = rb.description
				s = sm
			}
			props[o.bodyProp] = s
			if rb.required {
				required = append(required, o.bodyProp)
			}
		}
	}
	if conv.err != nil {
		return nil, 0, skip(reasonDocument, "%v", conv.err)
	}
	input := map[string]any{"type": "object", "properties": props}
	if len(required) > 0 {
		input["required"] = slices.Compact(slices.Sorted(slices.Values(required)))
	}
	b, err := json.Marshal(input)
	if err != nil {
		return nil, 0, skip(reasonSchema, "input schema: %v", err)
	}
	deepest = conv.deepest
	if conv.nodes > maxNodes || conv.copied > maxCopiedBytes {
		// Cut by its number of schemas, or by the text it copies: a
		// shallower cut may let other parts reach deeper, so no depth is
		// passed over.
		deepest = maxDepth
	}
	return b, deepest, nil
}

// ownsServers reports whether base_url decides where an operation whose
// own servers are these sends its requests: it does unless they are
// relative (a path under it, no host). The operator's base_url is where the
// config's secrets go; a document naming another host for one operation
// (GitHub's uploads) must not send them elsewhere, and for a GitHub
// Enterprise base_url that host is github.com's, the wrong one anyway.
func (b *builder) ownsServers(servers []any) bool {
	if b.c.BaseURL == "" {
		return false
	}
	srv, _ := servers[0].(map[string]any)
	u, err := url.Parse(expandServer(srv))
	// A network-path reference ("//host/x") names a host as surely as an
	// absolute URL: resolved against base_url it would take base_url's
	// scheme and the secrets to that host.
	return err == nil && (u.IsAbs() || u.Host != "")
}

// opBase is the first of an operation's (or its path item's) servers.
func (b *builder) opBase(servers []any) (string, error) {
	srv, ok := servers[0].(map[string]any)
	if !ok {
		return "", fmt.Errorf("servers[0]: want an object, got %s", kindOf(servers[0]))
	}
	raw := expandServer(srv)
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("servers[0].url %q: %w", str(srv, "url"), err)
	}
	if !u.IsAbs() {
		// Relative to where the document's other requests go (base_url,
		// or its own server), which is what a path below the API means.
		against, err := b.docBase()
		if err != nil {
			return "", err
		}
		a, err := url.Parse(against + "/")
		if err != nil {
			return "", err
		}
		u = a.ResolveReference(u)
	}
	if err := checkBaseURL(u.String()); err != nil {
		return "", fmt.Errorf("servers[0].url: %w", err)
	}
	return strings.TrimSuffix(u.String(), "/"), nil
}

// mergeable reports whether a body schema's properties can sit beside the
// parameters: an object schema of properties alone (additionalProperties
// false aside), none named like a parameter.
func mergeable(s map[string]any, params map[string]any) bool {
	if s["type"] != "object" {
		return false
	}
	props, ok := s["properties"].(map[string]any)
	if !ok || len(props) == 0 {
		return false
	}
	for k, v := range s {
		switch k {
		case "type", "properties", "required", "title", "description":
		case "additionalProperties":
			// false (Stripe's bodies say it): the properties listed are
			// the arguments the input schema offers anyway.
			if v != false {
				return false
			}
		default:
			return false
		}
	}
	for k := range props {
		if _, ok := params[k]; ok || !argNameRE.MatchString(k) {
			return false
		}
	}
	return true
}

// argNameRE is what the name of an input schema's property must match:
// Anthropic's API (and Bedrock's Converse) refuse a whole request, every
// tool of it, when one tool's input schema has a top-level property named
// otherwise ("input_schema.properties: Property keys should match
// pattern …"), as OData's $filter, Rails' ids[] and JSON:API's
// filter[name] are.
var argNameRE = regexp.MustCompile(`^[a-zA-Z0-9_.-]{1,64}$`)

var notArgChar = regexp.MustCompile(`[^a-zA-Z0-9_.-]+`)

// argNames gives an operation's parameters their properties.
type argNames struct {
	taken map[string]bool // the properties given
	next  map[string]int  // by base (see name): the next number to try
}

// name is the property a parameter named name, sent in in, is offered
// as: its name when argNameRE allows it and no property is taken by it;
// else its runs of other characters made "_" ($filter is filter,
// filter[name] is filter_name), cut to 64 characters, and told apart from
// the properties taken by "_" and its place, then a number. The
// parameter is still sent under its own name. Each base's numbers go on
// from the last one given: 20,000 parameters that all come out as "a"
// (a𠀀, a𠀁, …) tried every number before theirs, and a 1.3 MB document
// held serve's start for minutes.
func (a *argNames) name(name, in string) string {
	prop := name
	if !argNameRE.MatchString(prop) {
		prop = strings.Trim(notArgChar.ReplaceAllString(prop, "_"), "_")
		if prop == "" {
			prop = "arg"
		}
		prop = prop[:min(len(prop), 64)]
	}
	if !a.taken[prop] {
		a.taken[prop] = true
		return prop
	}
	base := prop[:min(len(prop), 64-len(in)-1)] + "_" + in
	prop = base
	for i := max(2, a.next[base]); ; i++ {
		if !a.taken[prop] {
			a.next[base] = i
			a.taken[prop] = true
			return prop
		}
		n := strconv.Itoa(i)
		prop = base[:min(len(base), 64-len(n)-1)] + "_" + n
	}
}

var pathParamRE = regexp.MustCompile(`\{([^{}]+)\}`)

// splitPath reads a path as documents write it to tell operations apart
// that share a path (AWS's "/#Action=AssumeRole", Box's
// "/files/{file_id}#add_shared_link", Flickr's
// "/rest?method=flickr.photos.search"): a fragment is not sent, and a
// query is sent before the parameters' pairs, each pair as written
// (escaped), except those whose value is a placeholder (key={name}),
// which bound lists by name with their key: parameter name is sent there
// as a query parameter.
func splitPath(raw string) (path string, query []string, bound map[string]string, err error) {
	raw, _, _ = strings.Cut(raw, "#")
	path, rawQuery, _ := strings.Cut(raw, "?")
	for pair := range strings.SplitSeq(rawQuery, "&") {
		if pair == "" {
			continue
		}
		k, v, hasValue := strings.Cut(pair, "=")
		if m := pathParamRE.FindStringSubmatch(v); m != nil && m[0] == v && !strings.ContainsAny(k, "{}") {
			if bound == nil {
				bound = map[string]string{}
			}
			bound[m[1]] = unescapeQuery(k)
			continue
		}
		if strings.ContainsAny(pair, "{}") {
			return "", nil, nil, skip(reasonDocument, "the path's query pair %q holds a placeholder toolwire cannot fill (only key={name})", pair)
		}
		e := queryEscape(unescapeQuery(k), false)
		if hasValue {
			e += "=" + queryEscape(unescapeQuery(v), false)
		}
		query = append(query, e)
	}
	return path, query, bound, nil
}

// unescapeQuery is s with its %-escapes decoded, or s when they are not
// valid.
func unescapeQuery(s string) string {
	if u, err := url.QueryUnescape(s); err == nil {
		return u
	}
	return s
}

var headerNameRE = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")

func validHeaderName(s string) bool { return headerNameRE.MatchString(s) }

// maxPathBytes bounds a path filled from arguments. A document's path may
// name one parameter many times ("/{a}/{a}/…"), each time the argument's
// value again: 4000 times in a 16 KB document made a 250 KB argument a
// 1 GB URL, which held 6.8 GB of memory until the call was abandoned.
// Go's HTTP server refuses a request line past 1 MiB (its default
// MaxHeaderBytes), and most refuse far less.
const maxPathBytes = 1 << 20

// fillPath is tmpl with each {name} of values replaced by its value (in
// one pass: a value is escaped, so it holds no placeholder), or an error
// when the path would be longer than maxPathBytes.
func fillPath(tmpl string, values map[string]string) (string, error) {
	n, over := len(tmpl), false
	path := pathParamRE.ReplaceAllStringFunc(tmpl, func(m string) string {
		v, ok := values[m[1:len(m)-1]]
		if !ok || over {
			return m
		}
		if n += len(v) - len(m); n > maxPathBytes {
			over = true
			return m
		}
		return v
	})
	if over {
		return "", fmt.Errorf("the path filled with these arguments would be longer than %d bytes, which servers refuse: its template names path parameters %d times", maxPathBytes, len(pathParamRE.FindAllStringIndex(tmpl, -1)))
	}
	return path, nil
}

// checkPath checks each segment of the filled path whose template holds
// a path parameter (httpsource.CheckSegment), naming the arguments that
// filled it.
func checkPath(tmpl, filled string, params []param) error {
	ts, fs := strings.Split(tmpl, "/"), strings.Split(filled, "/")
	if len(ts) != len(fs) {
		// Values are escaped, so they add no slash; only a parameter
		// name holding one would.
		return errors.New("the path parameters do not fit the path")
	}
	for i, seg := range ts {
		if !strings.Contains(seg, "{") {
			continue
		}
		err := httpsource.CheckSegment(fs[i])
		if err == nil {
			continue
		}
		var names []string
		for _, p := range params {
			if p.in == "path" && strings.Contains(seg, "{"+p.name+"}") {
				names = append(names, p.prop)
			}
		}
		return &httpsource.ArgumentError{Names: names, Err: err}
	}
	return nil
}

// call runs one call: arguments into the path, query, headers and body,
// the request through the HTTP request layer, the JSON response as the
// result (and its structured content when there is an output schema).
func (o *operation) call(ctx context.Context, call *tools.Call) (*tools.Result, error) {
	d := json.NewDecoder(bytes.NewReader(call.Arguments))
	d.UseNumber()
	var args map[string]any
	if len(bytes.TrimSpace(call.Arguments)) > 0 {
		if err := d.Decode(&args); err != nil {
			return nil, fmt.Errorf("decoding arguments: %w", err)
		}
	}
	values := map[string]string{} // the path's, by parameter name
	query := slices.Clone(o.query)
	header := http.Header{}
	params := make(map[string]bool, len(o.params))
	for _, p := range o.params {
		params[p.prop] = true
		v, ok := args[p.prop]
		if !ok || v == nil {
			if p.in == "path" {
				return tools.Errorf("argument %q is required: the path uses it", p.prop), nil
			}
			continue
		}
		switch p.in {
		case "path":
			s, err := pathValue(p.paramSpec, v)
			if err != nil {
				return tools.Errorf("%v", err), nil
			}
			values[p.name] = s
		case "query":
			pairs, err := queryPairs(p.paramSpec, v)
			if err != nil {
				return tools.Errorf("%v", err), nil
			}
			query = append(query, pairs...)
		case "header":
			s, err := headerValue(p.paramSpec, v)
			if err != nil {
				return tools.Errorf("%v", err), nil
			}
			header.Set(p.name, s)
		}
	}
	path, err := fillPath(o.path, values)
	if err != nil {
		return httpsource.InvalidArguments(err), nil
	}
	if err := checkPath(o.path, path, o.params); err != nil {
		return httpsource.InvalidArguments(err), nil
	}
	u := o.base + path
	if len(query) > 0 {
		u += "?" + strings.Join(query, "&")
	}
	req := httpsource.Request{Method: o.method, URL: u, Header: header}
	var body any
	has := false
	switch o.body {
	case mergedBody:
		rest := map[string]any{}
		for k, v := range args {
			// The input schema allows more (additionalProperties is
			// not false), but the operation's body has these members.
			if !params[k] && o.bodyMembers[k] {
				rest[k] = v
			}
		}
		if len(rest) > 0 || o.bodySpec.required {
			body, has = rest, true
		}
	case wrappedBody:
		body, has = args[o.bodyProp]
	}
	if has {
		req.ContentType = o.bodySpec.contentType
		if o.bodySpec.kind == bodyForm {
			members, ok := body.(map[string]any)
			if !ok {
				return tools.Errorf("argument %q: a form body is an object, got %s", o.bodyProp, kindOf(body)), nil
			}
			b, err := formBody(members, o.bodySpec.encoding)
			if err != nil {
				return tools.Errorf("%v", err), nil
			}
			req.Body = b
		} else {
			b, err := json.Marshal(body)
			if err != nil {
				return nil, err
			}
			req.Body = b
		}
	}
	resp, res, err := o.send.Send(ctx, req)
	if resp == nil {
		return res, err
	}
	if o.method == http.MethodHead {
		return resp.Result(tools.Text("HTTP " + resp.StatusLine)), nil
	}
	return resp.Structured(o.structured), nil
}
