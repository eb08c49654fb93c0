// Forms generated from a tool's input schema (JSON Schema 2020-12 as tools
// write it: objects, strings, numbers, integers, booleans, arrays, enums,
// maps, $ref into $defs, oneOf/anyOf, and a oneof's fields that exclude each
// other), and a validator for the same, so a form says what is wrong as the
// user types. What the form does not model is edited in the raw JSON beside
// it; the server validates everything again.
//
// Large schemas (a gRPC method's messages, which may contain themselves)
// are never expanded eagerly: a field whose schema is a $ref to a structure
// is drawn when it has a value or when the user asks for it, a choice
// (oneOf, anyOf, a oneof's fields) draws only the branch chosen, and a
// reference already being drawn further up is never drawn again unasked.
import { el, uid } from "./dom.js";
import { render as markdown } from "./markdown.js";

const maxHops = 32; // a chain of $refs that point at $refs
const maxCheckDepth = 256; // schemas nested while checking one value

// A tool's schema comes from its source (an upstream MCP server, an OpenAPI
// document, a remote toolwire), and a small one can ask for work that grows
// exponentially: {"allOf": [{"$ref": "#"}, {"$ref": "#"}]} is 53 bytes and
// 2^256 checks of any value, and a chain of 40 definitions, each an anyOf of
// the next one twice, 2^40; either held a tab for good. So the work is
// bounded, as patterns are never run (patternsNotRun): checking one value
// visits at most maxCheckSteps schemas, after which the value is said to be
// left to the server; merging a schema's allOf visits at most maxFlatSteps.
export const maxCheckSteps = 50_000;
const maxFlatSteps = 2_000;

// ---- schemas ----------------------------------------------------------------

// pointers remembers, for each root schema, what its references name:
// checking a value follows the same few references again and again.
const pointers = new WeakMap();

/** pointer is what the local reference ref ("#", "#/$defs/x") names in root. */
export function pointer(root, ref) {
  if (typeof ref !== "string" || !ref.startsWith("#")) return undefined;
  if (root === null || typeof root !== "object") return follow(root, ref);
  let known = pointers.get(root);
  if (!known) pointers.set(root, (known = new Map()));
  if (!known.has(ref)) known.set(ref, follow(root, ref));
  return known.get(ref);
}

function follow(root, ref) {
  let frag;
  try {
    frag = decodeURIComponent(ref.slice(1));
  } catch {
    return undefined;
  }
  if (frag === "") return root;
  if (!frag.startsWith("/")) return undefined; // an anchor: not followed
  let cur = root;
  for (const part of frag.slice(1).split("/")) {
    const key = part.replace(/~1/g, "/").replace(/~0/g, "~");
    if (cur === null || typeof cur !== "object" || !Object.prototype.hasOwnProperty.call(cur, key)) return undefined;
    cur = cur[key];
  }
  return cur;
}

/**
 * resolve is schema s with its $ref followed (through chains of them), the
 * keywords beside the $ref laid over the target's: the schema a form
 * shows. A reference that leads nowhere is the keywords beside it.
 */
export function resolve(s, root) {
  for (let hops = 0; s && typeof s === "object" && typeof s.$ref === "string" && hops < maxHops; hops++) {
    const { $ref, ...beside } = s;
    const target = pointer(root, $ref);
    if (target === undefined || target === true) return beside;
    if (target === false) return false;
    s = { ...target, ...beside };
  }
  return s;
}

/** refName is the last part of a reference: Expr of #/$defs/google.api.expr.v1alpha1.Expr. */
export function refName(ref) {
  const last = String(ref).split("/").pop() || "this object";
  return last.includes(".") && !last.endsWith(".") ? last.slice(last.lastIndexOf(".") + 1) : last;
}

/** typeOf is schema s's type: the first non-null one of a list, or what its keywords imply. */
export function typeOf(s) {
  if (!s || typeof s !== "object") return undefined;
  if (Array.isArray(s.type)) return s.type.find((t) => t !== "null") || (s.type.includes("null") ? "null" : undefined);
  if (s.type) return s.type;
  if (s.properties || s.additionalProperties !== undefined || s.patternProperties) return "object";
  if (s.items || s.prefixItems) return "array";
  if ("const" in s) return jsonType(s.const);
  if (s.enum) return jsonType(s.enum[0]);
  return undefined;
}

function jsonType(v) {
  if (v === null) return "null";
  if (Array.isArray(v)) return "array";
  if (Number.isInteger(v)) return "integer";
  return typeof v;
}

function typeMatches(want, v) {
  const got = jsonType(v);
  const wants = Array.isArray(want) ? want : [want];
  return wants.some((w) => w === got || (w === "number" && got === "integer"));
}

function isObject(v) {
  return jsonType(v) === "object";
}

/** merge lays schema b's keywords over a's, joining properties and required. */
function merge(a, b) {
  if (!a || typeof a !== "object") return b;
  if (!b || typeof b !== "object") return a;
  const out = { ...a, ...b };
  if (a.properties || b.properties) out.properties = { ...a.properties, ...b.properties };
  if (a.required || b.required) out.required = [...new Set([...(a.required || []), ...(b.required || [])])];
  return out;
}

/**
 * flat is s resolved, with its allOf merged in: the schema a form draws.
 * work ({steps}) bounds the schemas it visits, shared by the calls one
 * question makes; past it, what is left is not merged.
 */
function flat(s, root, work = { steps: maxFlatSteps }, depth = 0) {
  s = resolve(s, root);
  if (!s || typeof s !== "object" || !Array.isArray(s.allOf) || depth > 8 || (work.steps -= s.allOf.length) < 0) return s;
  const { allOf, ...rest } = s;
  return allOf.reduce((acc, part) => merge(acc, flat(part, root, work, depth + 1)), rest);
}

/** equal compares JSON values. */
function equal(a, b) {
  return JSON.stringify(a) === JSON.stringify(b);
}

// ---- choices ----------------------------------------------------------------

/**
 * branches are the forms a value of schema s may take when s is a oneOf or
 * anyOf: [{label, schema}], each branch's schema resolved and laid over
 * what s itself says beside the choice; null when s is no choice. A choice
 * of constants only is no choice: it is an enum (see enumOf).
 */
export function branches(s, root) {
  const work = { steps: maxFlatSteps };
  s = flat(s, root, work);
  if (!s || typeof s !== "object") return null;
  const list = Array.isArray(s.oneOf) ? s.oneOf : Array.isArray(s.anyOf) ? s.anyOf : null;
  if (!list || list.length === 0) return null;
  const { oneOf, anyOf, title, description, ...outer } = s;
  const bare = Object.keys(outer).length === 0;
  const out = list.map((raw, i) => {
    let b = flat(raw, root, work);
    if (!b || typeof b !== "object") b = b === false ? false : {};
    const schema = b === false ? false : bare ? b : merge(outer, b);
    return { label: schema === false ? "" : branchLabel(raw, schema, i), schema };
  }).filter((b) => b.schema !== false);
  if (out.length && out.every((b) => b.schema && ("const" in b.schema || Array.isArray(b.schema.enum)) && !b.schema.properties)) return null;
  const seen = new Map();
  for (const b of out) seen.set(b.label, (seen.get(b.label) || 0) + 1);
  out.forEach((b, i) => {
    if (seen.get(b.label) > 1) b.label += ` (${i + 1})`;
  });
  return out;
}

function branchLabel(raw, s, i) {
  if (s.title) return String(s.title);
  if (raw && typeof raw === "object" && typeof raw.$ref === "string") return refName(raw.$ref);
  if ("const" in s) return JSON.stringify(s.const);
  if (Array.isArray(s.enum)) return "one of " + s.enum.slice(0, 4).map((e) => JSON.stringify(e)).join(", ") + (s.enum.length > 4 ? ", …" : "");
  const t = typeOf(s);
  const list = (xs) => xs.slice(0, 3).join(", ") + (xs.length > 3 ? ", …" : "");
  if (t === "object") {
    const ks = Object.keys(s.properties || {});
    if (s.required && s.required.length) return `object with ${list(s.required)}`;
    return ks.length ? `object (${list(ks)})` : "object";
  }
  if (t === "array") return s.items && typeof s.items === "object" ? `list of ${branchLabel(s.items, s.items, 0)}` : "list";
  if (t) return s.format ? `${t} (${s.format})` : t;
  if (s.required && s.required.length) return `with ${list(s.required)}`;
  return `form ${i + 1}`;
}

/**
 * enumOf is the values schema s allows when it lists them: its enum, its
 * const, or a oneOf/anyOf of constants; undefined otherwise.
 */
export function enumOf(s, root) {
  const work = { steps: maxFlatSteps };
  s = flat(s, root, work);
  if (!s || typeof s !== "object") return undefined;
  if (Array.isArray(s.enum)) return s.enum;
  const list = s.oneOf || s.anyOf;
  if (Array.isArray(list) && list.length) {
    const vals = [];
    for (const raw of list) {
      const b = flat(raw, root, work);
      if (!b || typeof b !== "object" || b.properties) return undefined;
      if ("const" in b) vals.push(b.const);
      else if (Array.isArray(b.enum)) vals.push(...b.enum);
      else return undefined;
    }
    return vals;
  }
  return undefined;
}

/**
 * pickBranch is the index of the branch value belongs to: the first it
 * is valid against, else the first of its type, else 0; -1 for no value.
 */
export function pickBranch(bs, value, root) {
  if (value === undefined) return -1;
  for (const [i, b] of bs.entries()) if (problems(b.schema, value, "", root).length === 0) return i;
  for (const [i, b] of bs.entries()) {
    const t = typeOf(b.schema);
    if (t && typeMatches(t, value)) return i;
  }
  return 0;
}

/**
 * exclusions are the properties dependent schema d forbids, when that is
 * all it does: {properties: {b: false}} or {not: {anyOf: [{required: [b]}]}}
 * (how a protobuf oneof's fields exclude each other); null otherwise.
 */
function exclusions(d) {
  if (!d || typeof d !== "object") return null;
  const keys = Object.keys(d);
  if (keys.length === 1 && keys[0] === "properties" && d.properties && typeof d.properties === "object") {
    const names = Object.keys(d.properties);
    return names.length && names.every((n) => d.properties[n] === false) ? names : null;
  }
  if (keys.length === 1 && keys[0] === "not" && d.not && typeof d.not === "object") {
    const alts = Array.isArray(d.not.anyOf) ? d.not.anyOf : [d.not];
    const names = [];
    for (const a of alts) {
      if (!a || typeof a !== "object" || Object.keys(a).length !== 1 || !Array.isArray(a.required) || a.required.length !== 1) return null;
      names.push(a.required[0]);
    }
    return names.length ? names : null;
  }
  return null;
}

/**
 * exclusiveGroups are the sets of s's properties of which at most one may
 * be set (each pair forbids the other through dependentSchemas: a protobuf
 * oneof), in the order of s's properties; required properties are never
 * in one.
 */
export function exclusiveGroups(s) {
  if (!s || typeof s !== "object" || !s.dependentSchemas || typeof s.dependentSchemas !== "object") return [];
  const props = s.properties || {};
  const required = new Set(s.required || []);
  const order = Object.keys(props);
  const adj = new Map();
  const edge = (a, b) => {
    if (!adj.has(a)) adj.set(a, new Set());
    adj.get(a).add(b);
  };
  for (const [a, d] of Object.entries(s.dependentSchemas)) {
    for (const b of exclusions(d) || []) {
      if (a === b || !(a in props) || !(b in props) || required.has(a) || required.has(b)) continue;
      edge(a, b);
      edge(b, a);
    }
  }
  const groups = [];
  const seen = new Set();
  for (const name of order) {
    if (seen.has(name) || !adj.has(name)) continue;
    const group = [];
    const queue = [name];
    seen.add(name);
    while (queue.length) {
      const n = queue.shift();
      group.push(n);
      for (const m of adj.get(n) || []) if (!seen.has(m)) {
        seen.add(m);
        queue.push(m);
      }
    }
    // Only a set whose every pair excludes each other is a choice of one.
    const clique = group.every((a) => group.every((b) => a === b || adj.get(a).has(b)));
    if (group.length > 1 && clique) groups.push(group.sort((a, b) => order.indexOf(a) - order.indexOf(b)));
  }
  return groups;
}

// ---- validation -------------------------------------------------------------

/**
 * validate returns the problems of value against schema: [{path,
 * message}]. When checking would take more than maxCheckSteps, it returns
 * one problem marked unchecked: the value is the server's to check.
 */
export function validate(schema, value) {
  return problems(schema, value, "", schema);
}

function problems(s, v, path, root) {
  const ctx = { root, out: [], depth: 0, work: { steps: maxCheckSteps } };
  check(s, v, path, ctx);
  if (ctx.work.steps < 0) {
    return [{ path: path || "(the arguments)", message: `were not checked here: their schema takes more than ${maxCheckSteps} steps to check (the server checks them)`, unchecked: true }];
  }
  return ctx.out;
}

function join(path, key) {
  const k = /^[A-Za-z_$@][\w$@-]*$/.test(key) ? key : JSON.stringify(key);
  if (!path) return k;
  return k.startsWith('"') ? `${path}[${k}]` : `${path}.${k}`;
}

function sub(s, v, path, ctx) {
  const c = { root: ctx.root, out: [], depth: ctx.depth, work: ctx.work };
  check(s, v, path, c);
  return c.out;
}

function check(s, v, path, ctx) {
  if (s === true || s === undefined || s === null) return;
  const at = path || "(the arguments)";
  const out = ctx.out;
  if (s === false) {
    out.push({ path: at, message: "is not allowed here" });
    return;
  }
  if (typeof s !== "object" || ctx.depth >= maxCheckDepth || --ctx.work.steps < 0) return;
  ctx.depth++;
  try {
    if (typeof s.$ref === "string") {
      const target = pointer(ctx.root, s.$ref);
      if (target !== undefined) check(target, v, path, ctx);
    }
    if (s.type && !typeMatches(s.type, v)) {
      out.push({ path: at, message: `must be ${[].concat(s.type).join(" or ")}, not ${jsonType(v)}` });
      return;
    }
    if (Array.isArray(s.enum) && !s.enum.some((e) => equal(e, v))) {
      out.push({ path: at, message: `must be one of ${s.enum.map((e) => JSON.stringify(e)).join(", ")}` });
    }
    if ("const" in s && !equal(s.const, v)) out.push({ path: at, message: `must be ${JSON.stringify(s.const)}` });
    if (typeof v === "string") {
      const n = [...v].length;
      if (s.minLength !== undefined && n < s.minLength) out.push({ path: at, message: `must be at least ${s.minLength} characters` });
      if (s.maxLength !== undefined && n > s.maxLength) out.push({ path: at, message: `must be at most ${s.maxLength} characters` });
      // pattern is not checked here: see patternsNotRun.
    }
    if (typeof v === "number") {
      if (typeof s.minimum === "number" && v < s.minimum) out.push({ path: at, message: `must be ≥ ${s.minimum}` });
      if (typeof s.maximum === "number" && v > s.maximum) out.push({ path: at, message: `must be ≤ ${s.maximum}` });
      if (typeof s.exclusiveMinimum === "number" && v <= s.exclusiveMinimum) out.push({ path: at, message: `must be > ${s.exclusiveMinimum}` });
      if (typeof s.exclusiveMaximum === "number" && v >= s.exclusiveMaximum) out.push({ path: at, message: `must be < ${s.exclusiveMaximum}` });
      if (typeof s.multipleOf === "number" && s.multipleOf > 0 && Math.abs(v / s.multipleOf - Math.round(v / s.multipleOf)) > 1e-9) {
        out.push({ path: at, message: `must be a multiple of ${s.multipleOf}` });
      }
    }
    if (Array.isArray(v)) checkArray(s, v, path, at, ctx);
    if (isObject(v)) checkObject(s, v, path, ctx);
    if (Array.isArray(s.allOf)) for (const part of s.allOf) check(part, v, path, ctx);
    if (Array.isArray(s.anyOf)) checkChoice(s.anyOf, v, path, at, ctx, false);
    if (Array.isArray(s.oneOf)) checkChoice(s.oneOf, v, path, at, ctx, true);
    if (s.not !== undefined && sub(s.not, v, path, ctx).length === 0) out.push({ path: at, message: "must not match what its schema excludes" });
    if (s.if !== undefined) {
      const then = sub(s.if, v, path, ctx).length === 0 ? s.then : s.else;
      if (then !== undefined) check(then, v, path, ctx);
    }
  } finally {
    ctx.depth--;
  }
}

// patternsNotRun: a schema's pattern and patternProperties come from the
// tool's source (an upstream MCP server, an OpenAPI document), and
// JavaScript's regular expressions backtrack: ^(a+)+$ against 41 a's and a
// "!" held the tab for over a minute, run as a form was drawn. So the page
// runs none of them. The server checks every pattern before a call runs
// (Go's regexp, linear in its input) and its answer names the field; here
// a key's pattern is never tested: a key outside properties is checked
// against patternProperties' schema only when that is the one schema such
// a key can have.

function checkArray(s, v, path, at, ctx) {
  const out = ctx.out;
  if (s.minItems !== undefined && v.length < s.minItems) out.push({ path: at, message: `must have at least ${s.minItems} items` });
  if (s.maxItems !== undefined && v.length > s.maxItems) out.push({ path: at, message: `must have at most ${s.maxItems} items` });
  const prefix = Array.isArray(s.prefixItems) ? s.prefixItems : [];
  v.forEach((item, i) => {
    if (i < prefix.length) check(prefix[i], item, `${path}[${i}]`, ctx);
    else if (s.items !== undefined && typeof s.items !== "object") {
      if (s.items === false) out.push({ path: `${path}[${i}]`, message: "is one item too many" });
    } else if (s.items) check(s.items, item, `${path}[${i}]`, ctx);
  });
  if (s.uniqueItems === true) {
    const seen = new Set();
    for (const item of v) {
      const k = JSON.stringify(item);
      if (seen.has(k)) {
        out.push({ path: at, message: `must not hold ${k} twice` });
        break;
      }
      seen.add(k);
    }
  }
}

function checkObject(s, v, path, ctx) {
  const out = ctx.out;
  const at = path || "(the arguments)";
  for (const r of Array.isArray(s.required) ? s.required : []) {
    if (!(r in v)) out.push({ path: join(path, r), message: "is required" });
  }
  const keys = Object.keys(v);
  if (s.minProperties !== undefined && keys.length < s.minProperties) out.push({ path: at, message: `must have at least ${s.minProperties} properties` });
  if (s.maxProperties !== undefined && keys.length > s.maxProperties) out.push({ path: at, message: `must have at most ${s.maxProperties} properties` });
  const props = s.properties && typeof s.properties === "object" ? s.properties : {};
  const patterns = Object.values(s.patternProperties && typeof s.patternProperties === "object" ? s.patternProperties : {});
  for (const k of keys) {
    const p = join(path, k);
    if (s.propertyNames !== undefined && sub(s.propertyNames, k, "", ctx).length) out.push({ path: p, message: "is not a name this object allows" });
    if (Object.prototype.hasOwnProperty.call(props, k)) {
      check(props[k], v[k], p, ctx);
      continue;
    }
    // Whether k matches a pattern is the server's to say (patternsNotRun).
    const add = s.additionalProperties;
    if (patterns.length === 1 && add === false) check(patterns[0], v[k], p, ctx);
    else if (patterns.length) continue;
    else if (add === false) out.push({ path: p, message: "is not a property of this tool's arguments" });
    else if (add && typeof add === "object") check(add, v[k], p, ctx);
  }
  if (s.dependentRequired && typeof s.dependentRequired === "object") {
    for (const [k, needs] of Object.entries(s.dependentRequired)) {
      if (!(k in v) || !Array.isArray(needs)) continue;
      for (const n of needs) if (!(n in v)) out.push({ path: join(path, n), message: `is required when ${k} is set` });
    }
  }
  if (s.dependentSchemas && typeof s.dependentSchemas === "object") {
    const told = new Set(); // each conflict once, however many ways the schema forbids it
    for (const [k, d] of Object.entries(s.dependentSchemas)) {
      if (!(k in v)) continue;
      const ex = exclusions(d);
      if (ex) {
        const both = ex.filter((n) => n in v && !told.has(n));
        told.add(k);
        if (both.length) out.push({ path: join(path, k), message: `cannot be set together with ${both.join(", ")}: set only one of them` });
        continue;
      }
      for (const p of sub(d, v, path, ctx)) out.push({ path: p.path, message: `${p.message} (as ${k} is set)` });
    }
  }
}

function checkChoice(list, v, path, at, ctx, one) {
  const results = list.map((b) => sub(b, v, path, ctx));
  const ok = results.filter((r) => r.length === 0).length;
  if (one ? ok === 1 : ok >= 1) return;
  const labels = list.map((b, i) => {
    const r = resolve(b, ctx.root);
    return branchLabel(b, r && typeof r === "object" ? r : {}, i);
  });
  if (ok > 1) {
    const which = results.map((r, i) => (r.length === 0 ? labels[i] : null)).filter(Boolean);
    ctx.out.push({ path: at, message: `matches more than one of its forms (${which.join(", ")}); it must match exactly one` });
    return;
  }
  // The problems of the one branch of the value's type say most.
  const typed = list.map((b, i) => i).filter((i) => {
    const t = typeOf(resolve(list[i], ctx.root));
    return t !== undefined && typeMatches(t, v);
  });
  if (typed.length === 1) {
    ctx.out.push(...results[typed[0]]);
    return;
  }
  ctx.out.push({ path: at, message: `must match one of its forms: ${labels.join("; ")}` });
}

// ---- forms ------------------------------------------------------------------

/**
 * form renders the fields of an object schema bound to value (an object it
 * edits in place); changed() is called after every edit. Nested objects are
 * nested fieldsets; arrays are lists of fields with add and remove buttons;
 * maps are lists of keys and values; choices draw the branch chosen.
 */
export function form(schema, value, changed) {
  const ctx = { root: schema, chain: [] };
  const s = flat(schema, schema);
  return objectFields(s && typeof s === "object" ? s : {}, value, changed, "", ctx, true);
}

function slotOf(obj, name, changed) {
  return {
    get: () => obj[name],
    set: (v) => {
      if (v === undefined) delete obj[name];
      else obj[name] = v;
      changed();
    },
  };
}

// mapOf is the schema of s's entries beyond its properties, when it has
// them: {any: schema for any key, patterns: [schema of each of
// patternProperties]}; null when it allows none or says nothing of them.
function mapOf(s) {
  const patterns = Object.values(s.patternProperties && typeof s.patternProperties === "object" ? s.patternProperties : {});
  const add = s.additionalProperties;
  const any = add && typeof add === "object" ? add : null;
  if (!any && patterns.length === 0) return null;
  return { any, patterns };
}

function objectFields(s, obj, changed, path, ctx, top) {
  const box = el("div", { class: "fields" });
  const props = s.properties && typeof s.properties === "object" ? s.properties : {};
  const required = new Set(Array.isArray(s.required) ? s.required : []);
  const names = Object.keys(props);
  const map = mapOf(s);
  if (names.length === 0 && !map) {
    if (top) {
      box.append(el("p", { class: "hint" }, s.additionalProperties === false
        ? "This tool takes no arguments."
        : "This tool's schema names no arguments: write any in the JSON editor."));
    }
    return box;
  }
  const groups = exclusiveGroups(s);
  const groupOf = new Map(groups.flatMap((g) => g.map((n) => [n, g])));
  const done = new Set();
  for (const name of names) {
    if (done.has(name) || props[name] === false) continue;
    const g = groupOf.get(name);
    if (g) {
      g.forEach((n) => done.add(n));
      box.append(oneofField(g, props, obj, changed, path, ctx));
      continue;
    }
    const f = field(props[name], name, required.has(name), join(path, name), slotOf(obj, name, changed), changed, ctx);
    if (f) box.append(f);
  }
  if (map) box.append(mapEditor(map, names, obj, changed, path, ctx, names.length ? "other entries" : path.split(".").pop() || "arguments"));
  return box;
}

function description(s) {
  const d = s && typeof s === "object" && typeof s.description === "string" ? s.description.trim() : "";
  if (!d) return null;
  return el("div", { class: "desc", id: uid("d") }, markdown(d));
}

function label(id, name, required) {
  return el("label", { for: id },
    el("span", { class: "name" }, name),
    required ? el("span", { class: "req", title: "required" }, " *") : null);
}

function legend(name, required) {
  return el("legend", {}, el("span", { class: "name" }, name), required ? el("span", { class: "req", title: "required" }, " *") : null);
}

// described ties a control to its description for assistive technology.
function described(control, desc) {
  if (desc) control.setAttribute("aria-describedby", desc.id);
  return control;
}

function structured(s) {
  const t = typeOf(s);
  return t === "object" || t === "array" || Array.isArray(s.oneOf) || Array.isArray(s.anyOf);
}

/**
 * field renders one property; slot reads and writes its value. A $ref to a
 * structure is drawn lazily (see the top of this file) unless open.
 */
function field(raw, name, required, path, slot, changed, ctx, open = false) {
  const ref = raw && typeof raw === "object" && typeof raw.$ref === "string" ? raw.$ref : null;
  let s = flat(raw, ctx.root);
  if (s === false) return null;
  if (!s || typeof s !== "object") s = {};
  const cur = slot.get();
  if (ref && structured(s)) {
    const again = ctx.chain.includes(ref);
    if (!open && cur === undefined && (!required || again)) return lazyField(raw, s, name, required, path, slot, changed, ctx);
    ctx = { ...ctx, chain: [...ctx.chain, ref] };
  }
  const id = uid("f");
  const desc = description(s);
  const values = enumOf(s, ctx.root);
  if (values) {
    const sel = described(el("select", { id, dataset: { path } },
      required ? null : el("option", { value: "" }, "(none)"),
      values.map((v, i) => el("option", { value: String(i), selected: equal(v, cur) }, JSON.stringify(v)))), desc);
    if (required && cur === undefined && values.length) slot.set(values[0]);
    sel.addEventListener("change", () => slot.set(sel.value === "" ? undefined : values[+sel.value]));
    return el("div", { class: "field" }, label(id, name, required), desc, sel);
  }
  if ("const" in s) {
    if (required && cur === undefined) slot.set(s.const);
    return el("div", { class: "field" }, el("span", { class: "name" }, name), desc, el("code", { dataset: { path } }, JSON.stringify(s.const)));
  }
  const bs = branches(s, ctx.root);
  if (bs) return choiceField(bs, s, name, required, path, slot, changed, ctx, desc);
  const t = typeOf(s);
  switch (t) {
    case "string": {
      const long = (s.maxLength || 0) > 200 || /content|text|body|script|code|query/i.test(name);
      const input = described(el(long ? "textarea" : "input", { id, rows: long ? 3 : undefined, type: long ? undefined : "text", dataset: { path }, placeholder: s.default !== undefined ? String(s.default) : "" }), desc);
      input.value = cur ?? "";
      input.addEventListener("input", () => slot.set(input.value === "" && !required ? undefined : input.value));
      return el("div", { class: "field" }, label(id, name, required), desc, input);
    }
    case "number":
    case "integer": {
      const input = described(el("input", { id, type: "number", step: t === "integer" ? "1" : "any", dataset: { path }, min: s.minimum, max: s.maximum, placeholder: s.default !== undefined ? String(s.default) : "" }), desc);
      input.value = cur ?? "";
      input.addEventListener("input", () => {
        if (input.value === "") return slot.set(undefined);
        const n = Number(input.value);
        slot.set(Number.isNaN(n) ? input.value : n);
      });
      return el("div", { class: "field" }, label(id, name, required), desc, input);
    }
    case "boolean": {
      const input = described(el("input", { id, type: "checkbox", dataset: { path }, checked: cur === true }), desc);
      if (required && cur === undefined) slot.set(false);
      input.addEventListener("change", () => slot.set(input.checked ? true : required ? false : undefined));
      return el("div", { class: "field" }, el("div", { class: "check" }, input, label(id, name, required)), desc);
    }
    case "null": {
      if (required && cur === undefined) slot.set(null);
      return el("div", { class: "field" }, el("span", { class: "name" }, name), desc, el("code", { dataset: { path } }, "null"));
    }
    case "object": {
      if (!s.properties && !mapOf(s)) break; // any object: JSON text below
      let obj = cur;
      if (!isObject(obj)) {
        obj = {};
        if (required || open) slot.set(obj);
      }
      const inner = objectFields(s, obj, () => {
        if (slot.get() !== obj) slot.set(obj);
        else changed();
      }, path, ctx, false);
      const box = el("fieldset", { class: "nested", dataset: { path } }, legend(name, required), desc, inner);
      if (ref && !required) box.append(clearButton(raw, s, name, required, path, slot, changed, ctx, box));
      return box;
    }
    case "array":
      return arrayField(s, name, required, path, slot, changed, ctx, desc);
  }
  // Anything else (no type, a type list, an object of any shape): JSON
  // text for this field alone.
  const input = described(el("textarea", { id, rows: 2, dataset: { path }, class: "json" }), desc);
  input.value = cur === undefined ? "" : JSON.stringify(cur);
  input.addEventListener("input", () => {
    if (input.value.trim() === "") return slot.set(undefined);
    try {
      slot.set(JSON.parse(input.value));
      input.removeAttribute("aria-invalid");
    } catch {
      input.setAttribute("aria-invalid", "true");
    }
  });
  return el("div", { class: "field" }, label(id, name + " (JSON)", required), desc, input);
}

// lazyField stands for a structure not drawn yet: its name, what it is,
// and a button that draws it (and gives it a value).
function lazyField(raw, s, name, required, path, slot, changed, ctx) {
  const what = refName(raw.$ref);
  const box = el("fieldset", { class: "nested lazy", dataset: { path } }, legend(name, required), description(s));
  const open = el("button", { type: "button", class: "small set", dataset: { path }, "aria-label": `set ${name} (${what})` }, `Set ${name}`);
  open.addEventListener("click", () => {
    const f = field(raw, name, required, path, slot, changed, ctx, true);
    box.replaceWith(f);
    f.querySelector("input, select, textarea, button")?.focus();
  });
  box.append(el("p", { class: "hint" }, `${what}: not set. `, open));
  return box;
}

function clearButton(raw, s, name, required, path, slot, changed, ctx, box) {
  return el("button", { type: "button", class: "small clear", "aria-label": `clear ${name}`, onclick: () => {
    slot.set(undefined);
    box.replaceWith(lazyField(raw, s, name, required, path, slot, changed, ctx));
  } }, `Clear ${name}`);
}

// choiceField draws a select of the branches of a oneOf/anyOf and the form
// of the one chosen; choosing another keeps the value when it fits that
// branch, else starts it afresh.
function choiceField(bs, s, name, required, path, slot, changed, ctx, desc) {
  const id = uid("c");
  let chosen = pickBranch(bs, slot.get(), ctx.root);
  if (chosen < 0 && required) {
    chosen = 0;
    const v = initial(bs[0].schema, ctx.root);
    if (v !== undefined) slot.set(v);
  }
  const sel = described(el("select", { id, class: "branch", dataset: { path } },
    required ? null : el("option", { value: "" }, "(not set)"),
    bs.map((b, i) => el("option", { value: String(i), selected: i === chosen }, b.label))), desc);
  const body = el("div", { class: "branch-body" });
  const draw = () => {
    const b = bs[chosen];
    const f = b ? field(b.schema, `${name} (${b.label})`, true, path, slot, changed, ctx, true) : null;
    body.replaceChildren(...(f ? [f] : []));
  };
  sel.addEventListener("change", () => {
    chosen = sel.value === "" ? -1 : +sel.value;
    const cur = slot.get();
    if (chosen < 0) slot.set(undefined);
    else if (cur === undefined || problems(bs[chosen].schema, cur, "", ctx.root).length) slot.set(initial(bs[chosen].schema, ctx.root));
    draw();
  });
  draw();
  return el("div", { class: "field choice" }, label(id, name, required), desc, sel, body);
}

// oneofField draws the properties of which at most one may be set as a
// select of their names and the field of the one chosen.
function oneofField(group, props, obj, changed, path, ctx) {
  const id = uid("o");
  let chosen = group.find((n) => obj[n] !== undefined);
  const sel = el("select", { id, class: "oneof", dataset: { path: (path ? path + "." : "") + group.join("|"), oneof: group.join(",") } },
    el("option", { value: "" }, "(none)"),
    group.map((n) => el("option", { value: n, selected: n === chosen }, n)));
  const body = el("div", { class: "branch-body" });
  const draw = () => {
    const f = chosen ? field(props[chosen], chosen, false, join(path, chosen), slotOf(obj, chosen, changed), changed, ctx, true) : null;
    body.replaceChildren(...(f ? [f] : []));
  };
  sel.addEventListener("change", () => {
    for (const n of group) delete obj[n];
    chosen = sel.value || undefined;
    if (chosen) {
      const v = initial(flat(props[chosen], ctx.root), ctx.root);
      if (v !== undefined) obj[chosen] = v;
    }
    changed();
    draw();
  });
  draw();
  // The select's options name the fields; a label lists them when few.
  return el("div", { class: "field oneof" },
    el("label", { for: id }, el("span", { class: "name" }, group.length <= 3 ? `one of ${group.join(", ")}` : `one of ${group.length} fields`)),
    sel, body);
}

function arrayField(s, name, required, path, slot, changed, ctx, desc) {
  let arr = Array.isArray(slot.get()) ? slot.get() : undefined;
  const list = el("ol", { class: "items" });
  const items = s.items && typeof s.items === "object" ? s.items : {};
  const render = () => {
    list.replaceChildren();
    (arr || []).forEach((_, i) => {
      const remove = el("button", { type: "button", class: "small", "aria-label": `remove ${name} item ${i + 1}`, onclick: () => {
        arr.splice(i, 1);
        changed();
        render();
      } }, "Remove");
      const itemSlot = { get: () => arr[i], set: (v) => { arr[i] = v; changed(); } };
      list.append(el("li", {}, field(items, `${name}[${i}]`, true, `${path}[${i}]`, itemSlot, changed, ctx), remove));
    });
  };
  const add = el("button", { type: "button", class: "small", dataset: { path }, onclick: () => {
    if (!arr) {
      arr = [];
      slot.set(arr);
    }
    arr.push(initial(flat(items, ctx.root), ctx.root) ?? null);
    changed();
    render();
    list.lastElementChild?.querySelector("input, select, textarea")?.focus();
  } }, `Add ${name} item`);
  render();
  return el("fieldset", { class: "nested", dataset: { path } }, legend(name, required), desc, list, add);
}

// mapEditor edits the entries of obj beyond the properties known: a key
// and a value each, the value's field from the schema its key gets.
function mapEditor(map, known, obj, changed, path, ctx, name) {
  // A value's schema is the one an entry can have; where a key's pattern
  // would choose among several, any JSON value, which the server checks
  // (keys' patterns are not run here: patternsNotRun).
  const all = map.any ? [...map.patterns, map.any] : map.patterns;
  const sch = all.length === 1 ? all[0] : {};
  const rows = Object.keys(obj).filter((k) => !known.includes(k)).map((k) => ({ key: k, value: obj[k] }));
  const write = () => {
    for (const k of Object.keys(obj)) if (!known.includes(k)) delete obj[k];
    for (const r of rows) {
      r.dup = r.key !== "" && (known.includes(r.key) || Object.prototype.hasOwnProperty.call(obj, r.key));
      if (r.key !== "" && !r.dup && r.value !== undefined) obj[r.key] = r.value;
    }
    changed();
  };
  const list = el("ol", { class: "entries" });
  const render = () => {
    list.replaceChildren();
    rows.forEach((r, i) => {
      const keyID = uid("k");
      const key = el("input", { id: keyID, type: "text", class: "map-key", spellcheck: "false", dataset: { path: `${path}{key ${i + 1}}` }, value: r.key });
      const valueBox = el("div", { class: "map-value" });
      const drawValue = () => {
        const slot = { get: () => r.value, set: (v) => { r.value = v; write(); } };
        valueBox.replaceChildren(field(sch, "value", true, join(path, r.key || `(key ${i + 1})`), slot, write, ctx) || "");
      };
      key.addEventListener("input", () => {
        r.key = key.value;
        write();
        key.toggleAttribute("aria-invalid", !!r.dup);
        key.title = r.dup ? "this key is already set" : "";
        drawValue(); // the value's paths name the key
      });
      drawValue();
      const remove = el("button", { type: "button", class: "small", "aria-label": `remove ${name} entry ${i + 1}`, onclick: () => {
        rows.splice(i, 1);
        write();
        render();
      } }, "Remove");
      list.append(el("li", { class: "entry" }, el("div", { class: "field" }, el("label", { for: keyID }, "key"), key), valueBox, remove));
    });
  };
  const add = el("button", { type: "button", class: "small add-entry", dataset: { path } , onclick: () => {
    rows.push({ key: "", value: initial(flat(sch, ctx.root), ctx.root) });
    render();
    list.lastElementChild?.querySelector("input")?.focus();
  } }, `Add ${name} entry`);
  render();
  return el("div", { class: "map" }, list, add);
}

/**
 * initial is a new value of schema s (resolved): its default, its first
 * allowed value, or its type's zero. A choice whose first branch is a
 * choice again is followed maxHops deep (a schema may name itself so).
 */
export function initial(s, root, depth = 0) {
  if (!s || typeof s !== "object" || depth > maxHops) return null;
  if (s.default !== undefined) return structuredClone(s.default);
  if ("const" in s) return s.const;
  const values = enumOf(s, root);
  if (values && values.length) return values[0];
  const bs = branches(s, root);
  if (bs && bs.length) return initial(bs[0].schema, root, depth + 1);
  switch (typeOf(s)) {
    case "string": return "";
    case "number":
    case "integer": return 0;
    case "boolean": return false;
    case "object": return {};
    case "array": return [];
    case "null": return null;
  }
  return null;
}
