// The console's pure modules under Node's test runner: the validator the
// forms use and how forms choose what to draw, the Markdown reader, the
// tool search, times and the timeline's scale, and the Connect stream's
// frame decoder. Run by console's Go test (TestModules) with the
// machine's node.
//
// Times are checked in a zone with a half-hour offset, so local time is
// not UTC by accident.
process.env.TZ = "Asia/Kolkata";

import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { test } from "node:test";
import { maxStreamed, streamed } from "../static/js/dom.js";
import { parse, safeHref, summary } from "../static/js/markdown.js";
import { search, sourceText, terms } from "../static/js/match.js";
import { RPCError, frames, listAll } from "../static/js/rpc.js";
import { branches, enumOf, exclusiveGroups, initial, pickBranch, resolve, validate } from "../static/js/schema.js";
import { ago, parseTime, roundUp, span, when } from "../static/js/time.js";

const schema = {
  type: "object",
  properties: {
    name: { type: "string", minLength: 1 },
    n: { type: "integer", minimum: 0, maximum: 10 },
    mode: { enum: ["fast", "slow"] },
    tags: { type: "array", items: { type: "string" }, maxItems: 2 },
    user: { type: "object", properties: { city: { type: "string", pattern: "^[A-Z]" } }, required: ["city"] },
  },
  required: ["name"],
  additionalProperties: false,
};

test("validate accepts what the schema allows", () => {
  assert.deepEqual(validate(schema, { name: "a", n: 3, mode: "fast", tags: ["x"], user: { city: "Oslo" } }), []);
});

test("validate names each field and why", () => {
  const got = validate(schema, { n: 11.5, mode: "medium", tags: ["x", 1, "z"], user: { city: "oslo" }, extra: true })
    .map((p) => `${p.path} ${p.message}`);
  assert.deepEqual(got.sort(), [
    "extra is not a property of this tool's arguments",
    "mode must be one of \"fast\", \"slow\"",
    "n must be integer, not number",
    "name is required",
    "tags must have at most 2 items",
    "tags[1] must be string, not integer",
  ].sort());
});

// A schema's patterns come from the tool's source; JavaScript's regular
// expressions backtrack, and ^(a+)+$ against 41 a's and a "!" held a tab
// for over a minute. validate runs none of them (the server checks them),
// so this returns at once; run in a worker, so that the old code fails at
// the deadline rather than hang the runner.
test("validate runs no pattern of the schema", { timeout: 30_000 }, async () => {
  const { Worker } = await import("node:worker_threads");
  const url = new URL("../static/js/schema.js", import.meta.url).href;
  const w = new Worker(`
    import { parentPort } from "node:worker_threads";
    const { validate } = await import(${JSON.stringify(url)});
    const evil = "^(a+)+$", v = "a".repeat(41) + "!";
    const s = { type: "object", properties: {
      s: { type: "string", pattern: evil },
      m: { type: "object", patternProperties: { [evil]: { type: "integer" } }, additionalProperties: false },
      n: { type: "object", propertyNames: { pattern: evil } },
    } };
    parentPort.postMessage(validate(s, { s: v, m: { [v]: "x" }, n: { [v]: 1 } }).map((p) => p.path + " " + p.message));
  `, { eval: true, type: "module" });
  let timer;
  try {
    const got = await Promise.race([
      new Promise((resolve, reject) => { w.once("message", resolve); w.once("error", reject); }),
      new Promise((_, reject) => { timer = setTimeout(() => reject(new Error("validate was still running a schema's pattern after 10s")), 10_000); }),
    ]);
    // The value of the one schema a key of m can have is still checked.
    assert.deepEqual(got, [`m["${"a".repeat(41)}!"] must be integer, not string`]);
  } finally {
    clearTimeout(timer);
    await w.terminate();
  }
});

// A small schema can ask for exponential work: the root twice in an allOf
// (2^256 checks), or a chain of 40 definitions each an anyOf of the next
// one twice (2^40). Each once held the tab for good. Run in a worker, so a
// page that would hang ends the test rather than the runner.
test("validate and the forms' questions end on schemas that ask for exponential work", { timeout: 60_000 }, async () => {
  const { Worker } = await import("node:worker_threads");
  const url = new URL("../static/js/schema.js", import.meta.url).href;
  const w = new Worker(`
    import { parentPort } from "node:worker_threads";
    const { branches, enumOf, initial, maxCheckSteps, resolve, validate } = await import(${JSON.stringify(url)});
    const twice = { type: "object", allOf: [{ $ref: "#" }, { $ref: "#" }] };
    const defs = {};
    for (let i = 0; i < 40; i++) defs["d" + i] = { anyOf: [{ $ref: "#/$defs/d" + (i + 1) }, { $ref: "#/$defs/d" + (i + 1) }] };
    defs.d40 = { required: ["zz"] };
    const chain = { type: "object", $defs: defs, allOf: [{ $ref: "#/$defs/d0" }] };
    // allOf 60 wide and 8 deep: 60^8 merges, drawn whole.
    const wide = { type: "object", $defs: { l8: { properties: { a: { type: "string" } } } }, allOf: [{ $ref: "#/$defs/l0" }] };
    for (let i = 0; i < 8; i++) wide.$defs["l" + i] = { allOf: Array.from({ length: 60 }, () => ({ $ref: "#/$defs/l" + (i + 1) })) };
    // A choice whose first branch is itself.
    const self = { $defs: { a: { oneOf: [{ $ref: "#/$defs/a" }, { type: "string" }] } }, type: "object" };
    parentPort.postMessage({
      maxCheckSteps,
      twice: validate(twice, {}), chain: validate(chain, { zz: 1, x: [1, 2] }),
      wide: [branches({ oneOf: [{ $ref: "#/$defs/l0" }, { type: "string" }] }, wide).length, enumOf({ $ref: "#/$defs/l0" }, wide) === undefined, validate(wide, { a: 1 }).length > 0],
      self: initial(resolve({ $ref: "#/$defs/a" }, self), self),
    });
  `, { eval: true, type: "module" });
  let timer;
  try {
    const got = await Promise.race([
      new Promise((resolve, reject) => { w.once("message", resolve); w.once("error", reject); }),
      new Promise((_, reject) => { timer = setTimeout(() => reject(new Error("still checking a schema after 40s: its work is not bounded")), 40_000); }),
    ]);
    const unchecked = [{ path: "(the arguments)", message: `were not checked here: their schema takes more than ${got.maxCheckSteps} steps to check (the server checks them)`, unchecked: true }];
    assert.deepEqual(got.twice, unchecked);
    assert.deepEqual(got.chain, unchecked);
    assert.deepEqual(got.wide, [2, true, true]);
    assert.equal(got.self, null);
  } finally {
    clearTimeout(timer);
    await w.terminate();
  }
});

test("validate still checks a large value of a plain schema", () => {
  const s = { type: "object", properties: { rows: { type: "array", items: { type: "object", properties: { id: { type: "integer" }, name: { type: "string" } }, required: ["id"] } } } };
  const rows = Array.from({ length: 5000 }, (_, i) => ({ id: i, name: "n" + i }));
  rows[4321] = { name: "no id" };
  assert.deepEqual(validate(s, { rows }), [{ path: "rows[4321].id", message: "is required" }]);
});

test("validate refuses arguments that are not an object", () => {
  assert.equal(validate(schema, [1])[0].message, "must be object, not array");
});

function stream(chunks) {
  return new ReadableStream({
    start(c) {
      for (const ch of chunks) c.enqueue(ch);
      c.close();
    },
  });
}

function frame(flags, text) {
  const data = new TextEncoder().encode(text);
  const out = new Uint8Array(5 + data.length);
  out[0] = flags;
  new DataView(out.buffer).setUint32(1, data.length);
  out.set(data, 5);
  return out;
}

test("streamed keeps a call's last output and counts what came before", () => {
  let out;
  for (const chunk of ["ab", "cd", "efg"]) out = streamed(out, chunk, 4);
  assert.deepEqual(out, { text: "defg", dropped: 3 });
  // However much streams, what is kept stays at the bound.
  out = undefined;
  const line = "x".repeat(59_999) + "\n";
  for (let i = 0; i < 500; i++) out = streamed(out, line);
  assert.equal(out.text.length, maxStreamed);
  assert.equal(out.dropped, 500 * line.length - maxStreamed);
  assert.equal(streamed(undefined, "short").text, "short");
});

test("frames reads frames split anywhere across chunks", async () => {
  const all = new Uint8Array([...frame(0, '{"a":1}'), ...frame(0, ""), ...frame(2, "{}")]);
  for (const cut of [1, 3, 5, 7, 12, all.length - 1]) {
    const got = [];
    for await (const f of frames(stream([all.slice(0, cut), all.slice(cut)]))) got.push([f.flags, new TextDecoder().decode(f.data)]);
    assert.deepEqual(got, [[0, '{"a":1}'], [0, ""], [2, "{}"]], `cut at ${cut}`);
  }
});

test("frames refuses a stream that ends inside a frame", async () => {
  await assert.rejects(async () => {
    for await (const _ of frames(stream([frame(0, '{"a":1}').slice(0, 8)]))) {
      // nothing
    }
  }, /inside a frame/);
});

// ---- schemas: $ref, $defs, choices --------------------------------------

// The input schema of CEL's conformance service's Eval, as the gRPC source
// derives it by reflection: message types in $defs (Expr contains Exprs),
// oneofs as dependentSchemas, maps, well-known types.
const cel = JSON.parse(readFileSync(new URL("./cel-eval.schema.json", import.meta.url), "utf8"));
const def = (name) => resolve({ $ref: `#/$defs/google.api.expr.v1alpha1.${name}` }, cel);

test("validate follows $ref into $defs, recursive ones too", () => {
  const args = { parsedExpr: { expr: { id: "1", callExpr: { function: "_+_", args: [
    { constExpr: { int64Value: "1" } },
    { callExpr: { function: "f", args: [{ identExpr: { name: "x" } }, { constExpr: { int64Value: "x2" } }] } },
  ] } } } };
  // "x2" breaks int64Value's pattern, which is the server's to check (no
  // pattern runs here); 2 is not even a string.
  assert.deepEqual(validate(cel, args), []);
  args.parsedExpr.expr.callExpr.args[1].callExpr.args[1].constExpr.int64Value = 2;
  assert.deepEqual(validate(cel, args).map((p) => `${p.path} ${p.message}`), [
    "parsedExpr.expr.callExpr.args[1].callExpr.args[1].constExpr.int64Value must be string, not integer",
  ]);
  const self = { type: "object", properties: { next: { $ref: "#" }, n: { type: "integer" } } };
  assert.deepEqual(validate(self, { next: { next: { n: "x" } } }), [{ path: "next.next.n", message: "must be integer, not string" }]);
});

test("validate ends on a reference that names itself", () => {
  const loop = { $defs: { a: { $ref: "#/$defs/a" } }, type: "object", properties: { x: { $ref: "#/$defs/a" }, y: { $ref: "#/$defs/none" } } };
  assert.deepEqual(validate(loop, { x: 1, y: 2 }), []);
});

test("a oneof's fields exclude each other, in either form the gRPC source writes", () => {
  // Each field forbids those after it (properties: false) …
  assert.deepEqual(exclusiveGroups(cel), [["checkedExpr", "parsedExpr"]]);
  assert.deepEqual(exclusiveGroups(def("Expr")), [["callExpr", "comprehensionExpr", "constExpr", "identExpr", "listExpr", "selectExpr", "structExpr"]]);
  assert.deepEqual(validate(cel, { parsedExpr: {}, checkedExpr: {} }), [{ path: "parsedExpr", message: "cannot be set together with checkedExpr: set only one of them" }]);
  // … or each forbids all others (not anyOf required), each conflict told once.
  const old = { type: "object", properties: { a: {}, b: {}, c: {}, d: {} }, dependentSchemas: {
    a: { not: { anyOf: [{ required: ["b"] }, { required: ["c"] }] } },
    b: { not: { anyOf: [{ required: ["a"] }, { required: ["c"] }] } },
    c: { not: { anyOf: [{ required: ["a"] }, { required: ["b"] }] } },
  } };
  assert.deepEqual(exclusiveGroups(old), [["a", "b", "c"]]);
  assert.deepEqual(validate(old, { a: 1, c: 2, d: 3 }), [{ path: "a", message: "cannot be set together with c: set only one of them" }]);
  // A dependent schema that does more is no choice of one.
  assert.deepEqual(exclusiveGroups({ properties: { a: {}, b: {} }, dependentSchemas: { a: { required: ["b"] } } }), []);
  assert.deepEqual(exclusiveGroups({ properties: { a: {}, b: {}, c: {} }, dependentSchemas: { a: { properties: { b: false } }, b: { properties: { c: false } } } }), []);
});

test("branches name a choice's forms, laid over what the schema says beside it", () => {
  const shape = { type: "object", properties: { id: { type: "integer" } }, oneOf: [
    { title: "Circle", properties: { radius: { type: "number" } }, required: ["radius"] },
    { $ref: "#/$defs/Square" },
    { type: "null" },
  ], $defs: { Square: { properties: { side: { type: "number" } }, required: ["side"] } } };
  const bs = branches(shape, shape);
  assert.deepEqual(bs.map((b) => b.label), ["Circle", "Square", "null"]);
  assert.deepEqual(Object.keys(bs[1].schema.properties), ["id", "side"]);
  assert.equal(pickBranch(bs, undefined, shape), -1);
  assert.equal(pickBranch(bs, { side: 2 }, shape), 1);
  assert.equal(pickBranch(bs, { radius: 2 }, shape), 0);
  assert.equal(pickBranch(bs, { id: 1 }, shape), 0); // of its type, though it fits none
  // A float: a number, or one of the names protojson reads.
  const dbl = def("Constant").properties.doubleValue;
  assert.deepEqual(branches(dbl, cel).map((b) => b.label), ["number", 'one of "NaN", "Infinity", "-Infinity"']);
  assert.equal(pickBranch(branches(dbl, cel), "NaN", cel), 1);
  assert.deepEqual(validate({ properties: { d: dbl } }, { d: "nan" }), [{ path: "d", message: 'must be one of "NaN", "Infinity", "-Infinity"' }]);
  // Constants are no choice but an enum.
  assert.equal(branches({ anyOf: [{ const: "a" }, { const: "b" }] }, {}), null);
  assert.deepEqual(enumOf({ oneOf: [{ const: "a" }, { enum: ["b", "c"] }] }, {}), ["a", "b", "c"]);
});

test("validate says which form a choice's value should take", () => {
  const s = { type: "object", properties: {
    milestone: { oneOf: [{ type: "string" }, { type: "integer" }, { type: "null" }] },
    labels: { type: "array", items: { anyOf: [{ type: "string" }, { type: "object", properties: { name: { type: "string" } } }] } },
    n: { oneOf: [{ type: "integer" }, { type: "number" }] },
  } };
  assert.deepEqual(validate(s, { milestone: true, labels: ["a", { name: 1 }], n: 1 }).map((p) => `${p.path} ${p.message}`), [
    "milestone must match one of its forms: string; integer; null",
    "labels[1].name must be string, not integer",
    "n matches more than one of its forms (integer, number); it must match exactly one",
  ]);
});

test("validate checks maps' keys and values", () => {
  const s = { type: "object", properties: {
    labels: { type: "object", additionalProperties: { type: "string" } },
    ids: { type: "object", patternProperties: { "^[0-9]+$": { type: "integer" } }, additionalProperties: false },
  } };
  assert.deepEqual(validate(s, { labels: { bug: "red", "help wanted": 3 }, ids: { 12: 1, x: 2, 7: "a" } }).map((p) => `${p.path} ${p.message}`), [
    'labels["help wanted"] must be string, not integer',
    'ids["7"] must be integer, not string',
  ]);
});

test("initial starts a value of its schema", () => {
  assert.deepEqual(initial(def("Expr"), cel), {});
  assert.equal(initial(def("Constant").properties.nullValue, cel), null);
  assert.equal(initial({ oneOf: [{ type: "integer" }, { type: "string" }] }, {}), 0);
  assert.equal(initial({ enum: ["b", "a"] }, {}), "b");
});

// ---- Markdown -----------------------------------------------------------------

test("Markdown: paragraphs, code, emphasis, links and lists", () => {
  assert.deepEqual(parse("Lists **repositories** for the *user*, as `GET /user/repos`.\nSee [the docs](https://docs.github.com/rest \"t\").\n\n- one\n- two `x`\n  more\n\n1. first\n2. second\n\n```json\n{\"a\": \"<b>\"}\n```"), [
    { t: "p", c: ["Lists ", { t: "strong", c: ["repositories"] }, " for the ", { t: "em", c: ["user"] }, ", as ", { t: "code", text: "GET /user/repos" },
      ". See ", { t: "a", href: "https://docs.github.com/rest", c: ["the docs"] }, "."] },
    { t: "ul", start: 1, items: [[{ t: "p", c: ["one"] }], [{ t: "p", c: ["two ", { t: "code", text: "x" }, " more"] }]] },
    { t: "ol", start: 1, items: [[{ t: "p", c: ["first"] }], [{ t: "p", c: ["second"] }]] },
    { t: "code", text: '{"a": "<b>"}' },
  ]);
});

test("Markdown: snake_case names and lone stars stay text", () => {
  assert.deepEqual(parse("per_page and created_at, 2 * 3 * 4, GET /pet/**"), [{ t: "p", c: ["per_page and created_at, 2 * 3 * 4, GET /pet/**"] }]);
  assert.deepEqual(parse("***both*** and __strong__ and _em_"), [{ t: "p", c: [
    { t: "strong", c: [{ t: "em", c: ["both"] }] }, " and ", { t: "strong", c: ["strong"] }, " and ", { t: "em", c: ["em"] }] }]);
});

test("Markdown: hostile input stays text, links lead to http(s) only", () => {
  const blocks = parse("<script>alert(1)</script> <img src=x onerror=alert(1)>\n\n" +
    "[js](javascript:alert(1)) [JS](JaVaScRiPt:alert(1)) [enc](java&#115;cript:alert(1)) [tab](java\tscript:x) [data](data:text/html,x) [rel](/relative) <javascript:alert(1)> [ok](https://example.com/a?b=c&amp;d=e)\n\n" +
    "&lt;b&gt; &amp;lt; &#60;i&#62; &#0; &#xD800; &bogus;");
  assert.deepEqual(blocks, [
    { t: "p", c: ["<script>alert(1)</script> <img src=x onerror=alert(1)>"] },
    { t: "p", c: ["js", " ", "JS", " ", "enc", " [tab](java\tscript:x) ", "data", " ", "rel", " ", "javascript:alert(1)", " ", { t: "a", href: "https://example.com/a?b=c&d=e", c: ["ok"] }] },
    { t: "p", c: ["<b> &lt; <i> \ufffd \ufffd &bogus;"] },
  ]);
  for (const bad of ["javascript:alert(1)", " JAVASCRIPT:x", "java\nscript:x", "data:text/html,x", "vbscript:x", "/x", "//evil.example", "file:///etc/passwd"]) {
    assert.equal(safeHref(bad), null, bad);
  }
  assert.equal(safeHref("https://example.com/a b"), "https://example.com/a%20b");
});

test("Markdown: bare URLs, headings, quotes, hard breaks", () => {
  assert.deepEqual(parse("# Title #\n> quoted\n\nsee https://example.com/a_(b)). now\nline  \nbreak"), [
    { t: "h", level: 1, c: ["Title"] },
    { t: "quote", c: [{ t: "p", c: ["quoted"] }] },
    { t: "p", c: ["see ", { t: "a", href: "https://example.com/a_(b)", c: ["https://example.com/a_(b)"] }, "). now line", { t: "br" }, "break"] },
  ]);
});

test("Markdown: any text parses quickly and to a bounded tree", () => {
  for (const s of ["*a ".repeat(20000), "[".repeat(40000), "[a](".repeat(10000), "`".repeat(40000), "`a".repeat(20000), "a\n".repeat(20000),
    "- ".repeat(20000), "- a\n".repeat(10000), "> ".repeat(20000), "_a_".repeat(20000), "**a".repeat(10000), "<a:".repeat(10000), " h".repeat(20000)]) {
    const blocks = parse(s);
    assert.ok(Array.isArray(blocks) && blocks.length > 0);
  }
});

test("summary is the first paragraph as text, cut short", () => {
  assert.equal(summary("Get a repository\n\nThe `parent` object is present when it is a fork."), "Get a repository");
  assert.equal(summary("Uses `ListTools` with **paging**\nover two lines."), "Uses ListTools with paging over two lines.");
  assert.equal(summary("word ".repeat(100), 40), "word word word word word word word word…");
  assert.equal(summary(""), "");
});

// ---- the tool search ----------------------------------------------------------

// The reference cases of the tool search (tools/search's, which SearchTools
// implements): the console's finds the same tools in the same order. Read
// from tools/search/testdata when the tree has it; else from the copy
// beside this file (taken from it).
const reference = new URL("../../../tools/search/testdata/cases.json", import.meta.url);
const searchCases = JSON.parse(readFileSync(existsSync(reference) ? reference : new URL("./search-cases.json", import.meta.url), "utf8"));

test("search: the reference cases of the tool search", () => {
  const source = (t) => sourceText(t.kind, t.owner);
  // In ListTools' order, by name, as the registry's snapshot is.
  const tools = [...searchCases.tools].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  for (const c of searchCases.queries) {
    const got = search(tools, c.query, source).map((t) => t.name);
    if (c.error) {
      assert.equal(terms(c.query).length, 0, c.query); // the server refuses it; the console lists every tool
      assert.equal(got.length, tools.length);
      continue;
    }
    assert.equal(got.length, c.total, c.query);
    assert.deepEqual(got.slice(0, c.limit || got.length), c.want, c.query);
  }
});

test("search: terms, phrases and the order given for equal scores", () => {
  assert.deepEqual(terms(' Pull  "Pull request" "unclosed  phrase '), ["pull", "pull request", "unclosed  phrase"]);
  assert.deepEqual(terms(""), []);
  assert.equal(terms("a ".repeat(40) + " " + [...Array(40).keys()].join(" ")).length, 32);
  const tools = [{ name: "b_tool", description: "x" }, { name: "a_tool", description: "x" }];
  assert.deepEqual(search(tools, "x", () => "").map((t) => t.name), ["b_tool", "a_tool"]);
  assert.equal(sourceText("http", "openapi:GitHub"), "http openapi:github");
  assert.equal(sourceText("builtin", "builtin"), "builtin");
});

// ---- times --------------------------------------------------------------------

test("when: local time to the millisecond, and how long ago", () => {
  const now = Date.parse("2025-03-01T10:00:00Z");
  assert.deepEqual(when("2025-03-01T09:59:57.123456789Z", now), { text: "15:29:57.123 (2 s ago)", title: "2025-03-01 15:29:57.123 +05:30", iso: "2025-03-01T09:59:57.123456789Z" });
  assert.equal(when("2025-02-27T08:00:00Z", now).text, "2025-02-27 13:30:00.000 (2 days ago)");
  assert.equal(when("2025-03-01T10:00:00.4Z", now).text, "15:30:00.400 (just now)");
  assert.deepEqual(when("not a time", now), { text: "not a time", title: "", iso: "" });
  assert.equal(parseTime("2025-03-01T10:00:00.999999999+01:00").toISOString(), "2025-03-01T09:00:00.999Z");
  assert.equal(ago(-90_000), "in 1 min");
  assert.equal(ago(3 * 3600_000), "3 h ago");
});

test("span: a running call's track reaches its deadline", () => {
  // A call 2 s into a 10-minute timeout: the track is the ten minutes.
  assert.equal(span([{ start: 100, timeout: 600_000 }], 2100, true), 600_100);
  // No timeout known: a round time ahead of it.
  assert.equal(span([{ start: 0 }], 3000, true), 5000);
  assert.equal(roundUp(61), 120);
  // Finished: the batch's own span, with room for the last bar.
  assert.equal(span([{ start: 0, end: 1000, timeout: 600_000 }, { start: 500, end: 2000 }], 5000, false), 2040);
  // Waiting calls take no room.
  assert.equal(span([{ start: undefined }], 0, true), 1);
});

// ---- ListTools, page after page ----------------------------------------------

// pager is a fake ListTools of the given pages ({tools, revision}), each
// answer made by answer(request, i) when given; it records the requests.
function pager(pages, answer) {
  const requests = [];
  const call = async (req) => {
    requests.push(req);
    const i = req.pageToken ? Number(req.pageToken.slice(1)) : 0;
    if (answer) {
      const a = answer(req, i, requests.length);
      if (a) return a;
    }
    const p = pages[i];
    return { tools: p.tools.map((name) => ({ name })), revision: p.revision, nextPageToken: i + 1 < pages.length ? `p${i + 1}` : "" };
  };
  return { call, requests };
}

test("listAll: one answer from a server that does not page", async () => {
  const { call, requests } = pager([{ tools: ["a", "b"], revision: "r1" }]);
  assert.deepEqual(await listAll(call), { tools: [{ name: "a" }, { name: "b" }], revision: "r1" });
  assert.deepEqual(requests, [{ pageSize: 1000 }]);
});

test("listAll: every page, in order", async () => {
  const { call, requests } = pager([{ tools: ["a"], revision: "r" }, { tools: ["b"], revision: "r" }, { tools: ["c"], revision: "r" }]);
  assert.deepEqual((await listAll(call)).tools.map((t) => t.name), ["a", "b", "c"]);
  assert.deepEqual(requests.map((r) => r.pageToken || ""), ["", "p1", "p2"]);
});

test("listAll: starts again when the tools change between pages", async () => {
  // The second page of the first listing is of another revision; the
  // third request's token is refused as of an old revision.
  const { call, requests } = pager([{ tools: ["a"], revision: "r2" }, { tools: ["b"], revision: "r2" }], (req, i, n) => {
    if (n === 1) return { tools: [{ name: "old" }], revision: "r1", nextPageToken: "p1" };
    if (n === 4) throw new RPCError("aborted", "the tools changed since this listing began");
    return null;
  });
  assert.deepEqual(await listAll(call), { tools: [{ name: "a" }, { name: "b" }], revision: "r2" });
  assert.deepEqual(requests.map((r) => r.pageToken || ""), ["", "p1", "", "p1", "", "p1"]);
});

test("listAll: gives up on what starting again cannot mend", async () => {
  const refused = pager([{ tools: ["a"], revision: "r" }, { tools: ["b"], revision: "r" }], (req, i) => {
    if (i === 1) throw new RPCError("unauthenticated", "no");
    return null;
  });
  await assert.rejects(listAll(refused.call), (e) => e.code === "unauthenticated");
  assert.equal(refused.requests.length, 2);
  const changing = pager([], (req, i, n) => ({ tools: [], revision: `r${n}`, nextPageToken: i === 0 ? "p1" : "" }));
  await assert.rejects(listAll(changing.call), /changed while they were listed/);
  assert.equal(changing.requests.length, 8); // four listings of two pages
  const stuck = pager([], () => ({ tools: [{ name: "a" }], revision: "r", nextPageToken: "p1" }));
  await assert.rejects(listAll(stuck.call), /does not advance/);
});
