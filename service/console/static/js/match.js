// The one tool search of the console: the Tools page's filter and the
// Try page's pickers both call search, so a query finds the same tools in
// both places. It follows the reference matching and ranking of the
// SearchTools RPC (package tools/search, docs/contract.md), and is checked
// against its cases (testdata/modules.test.mjs):
//
// A query is terms: words separated by white space, and phrases in double
// quotes (an unclosed quote runs to the end), lower-cased, each once. A
// tool matches when every term occurs in its name, title, description or
// source (its kind, "builtin", "http", "mcp" or "remote", and its owner in
// the registry, such as "openapi:github"). Matches are ranked by the sum
// over the terms of where each is best found, a term at the start of a
// word counting more than one inside a word; equal scores keep the order
// given (ListTools', by name).

// Weights: what one term scores where it is best found.
const nameExact = 100;
const nameWordStart = 60;
const nameInside = 40;
const titleStart = 30;
const titleInside = 20;
const sourceAny = 15;
const descStart = 10;
const descInside = 5;

/** maxTerms bounds a query, as the server's does (the rest is ignored here). */
const maxTerms = 32;

/** terms are the query's terms, lower-cased, each once; none for an empty query. */
export function terms(query) {
  const out = [];
  let rest = String(query || "");
  for (;;) {
    rest = rest.replace(/^\s+/u, "");
    if (!rest) break;
    let term;
    if (rest[0] === '"') {
      const close = rest.indexOf('"', 1);
      term = (close < 0 ? rest.slice(1) : rest.slice(1, close)).trim();
      rest = close < 0 ? "" : rest.slice(close + 1);
    } else {
      term = /^[^\s"]+/u.exec(rest)[0];
      rest = rest.slice(term.length);
    }
    if (!term) continue;
    term = term.toLowerCase();
    if (!out.includes(term)) out.push(term);
    if (out.length >= maxTerms) break;
  }
  return out;
}

const wordy = /[\p{L}\p{Nd}]/u;

// wordStart reports whether position i of s starts a word: the start of
// s, or after a character that is neither a letter nor a digit.
function wordStart(s, i) {
  if (i === 0) return true;
  const before = s.codePointAt(i - 1);
  const prev = before >= 0xdc00 && before <= 0xdfff && i >= 2 ? String.fromCodePoint(s.codePointAt(i - 2)) : String.fromCharCode(before);
  return !wordy.test(prev);
}

// found scores term in field: atStart when it occurs at the start of a
// word, inside when only within one, 0 when not at all.
function found(field, term, atStart, inside) {
  let best = 0;
  for (let off = 0; ; ) {
    const i = field.indexOf(term, off);
    if (i < 0) return best;
    if (wordStart(field, i)) return atStart;
    best = inside;
    off = i + (field.codePointAt(i) > 0xffff ? 2 : 1);
  }
}

/**
 * score is how well tool t, whose source is source (lower-cased: "http
 * openapi:github"), matches the terms: 0 when a term occurs nowhere,
 * else the sum of each term's best place (1 when there are no terms).
 */
export function score(t, source, ts) {
  if (ts.length === 0) return 1;
  const name = (t.name || "").toLowerCase();
  const title = (t.title || "").toLowerCase();
  const desc = (t.description || "").toLowerCase();
  let total = 0;
  for (const term of ts) {
    let s;
    if (name === term) s = nameExact;
    else {
      s = Math.max(found(name, term, nameWordStart, nameInside), found(title, term, titleStart, titleInside));
      if (s < sourceAny && source.includes(term)) s = sourceAny;
      if (s < descStart) s = Math.max(s, found(desc, term, descStart, descInside));
    }
    if (s === 0) return 0;
    total += s;
  }
  return total;
}

/**
 * search returns the tools that match query, best first (equal scores in
 * the order given); sourceOf(t) is t's source as score takes it. With no
 * terms, every tool, in the order given.
 */
export function search(tools, query, sourceOf) {
  const ts = terms(query);
  if (ts.length === 0) return tools.slice();
  const hits = [];
  for (const [i, t] of tools.entries()) {
    const s = score(t, sourceOf ? sourceOf(t).toLowerCase() : "", ts);
    if (s > 0) hits.push({ t, s, i });
  }
  hits.sort((a, b) => b.s - a.s || a.i - b.i);
  return hits.map((h) => h.t);
}

/**
 * sourceText is what a tool's source is to the search: its kind (the
 * contract's ToolSource, as "builtin") and, when it differs, its owner in
 * the registry ("openapi:github"), lower-cased.
 */
export function sourceText(kind, owner) {
  kind = String(kind || "").toLowerCase();
  owner = String(owner || "").toLowerCase();
  return !owner || owner === kind ? kind : `${kind} ${owner}`;
}
