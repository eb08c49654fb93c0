// The one tool search of the console: the Tools page's filter and the
// Try page's pickers both call search, so a query finds the same tools in
// both places.
//
// The rule: the query is split on white space into words, compared
// without regard to case; a tool matches when every word occurs, as a
// substring, in its name, title, description or source. Matches are
// ranked by where their words occur (the whole name, the start of the
// name, the name, the title, the source, the description, in that order
// of weight), then by name.

const weights = { exact: 100, prefix: 60, name: 40, title: 20, source: 10, description: 4 };

/** words are the query's words, lower-cased; none for an empty query. */
export function words(query) {
  return String(query || "").toLowerCase().split(/\s+/).filter(Boolean);
}

/**
 * score is how well tool t (with its source's label) matches the words:
 * 0 when some word occurs nowhere, else a positive rank (1 when there are
 * no words).
 */
export function score(t, source, ws) {
  if (ws.length === 0) return 1;
  const name = (t.name || "").toLowerCase();
  const title = (t.title || "").toLowerCase();
  const src = (source || "").toLowerCase();
  const desc = (t.description || "").toLowerCase();
  let total = 0;
  for (const w of ws) {
    let best = 0;
    if (name === w) best = weights.exact;
    else if (name.startsWith(w)) best = weights.prefix;
    else if (name.includes(w)) best = weights.name;
    else if (title.includes(w)) best = weights.title;
    else if (src.includes(w)) best = weights.source;
    else if (desc.includes(w)) best = weights.description;
    if (best === 0) return 0;
    total += best;
  }
  return total;
}

/**
 * search returns the tools that match query, best first (ties by name);
 * sourceOf(t) is the label of t's source. With no words, every tool, in
 * the order given.
 */
export function search(tools, query, sourceOf) {
  const ws = words(query);
  if (ws.length === 0) return tools.slice();
  const hits = [];
  for (const t of tools) {
    const s = score(t, sourceOf ? sourceOf(t) : "", ws);
    if (s > 0) hits.push({ t, s });
  }
  hits.sort((a, b) => b.s - a.s || (a.t.name < b.t.name ? -1 : a.t.name > b.t.name ? 1 : 0));
  return hits.map((h) => h.t);
}
