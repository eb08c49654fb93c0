// el builds an element: el("div", {class: "x", onclick: f}, child, "text", …).
// Text is always a text node: nothing from the server is parsed as HTML.
export function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (k === "class") e.className = v;
    else if (k === "dataset") Object.assign(e.dataset, v);
    else if (k in e && typeof v !== "string") e[k] = v;
    else e.setAttribute(k, v === true ? "" : v);
  }
  append(e, children);
  return e;
}

function append(e, children) {
  for (const c of children) {
    if (c === undefined || c === null || c === false) continue;
    if (Array.isArray(c)) append(e, c);
    else e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

let ids = 0;
/** uid returns an ID unique in the page, for label/for pairs. */
export function uid(prefix) {
  ids++;
  return `${prefix}-${ids}`;
}

/** pretty returns JSON text indented, or the text as it is when it is not JSON. */
export function pretty(text) {
  if (!text) return "";
  try {
    return JSON.stringify(JSON.parse(text), null, 2);
  } catch {
    return text;
  }
}

/** seconds reads a protobuf Duration in JSON ("1.5s") as a number of seconds. */
export function seconds(d) {
  if (!d) return 0;
  return parseFloat(String(d).replace(/s$/, "")) || 0;
}

export function fmtSeconds(s) {
  if (s < 1) return `${Math.round(s * 1000)} ms`;
  if (s < 120) return `${s.toFixed(s < 10 ? 2 : 1)} s`;
  return `${Math.floor(s / 60)} min ${Math.round(s % 60)} s`;
}

/**
 * The characters of a call's streamed output the page keeps: its last 64 Ki.
 * A command may stream for as long as its timeout allows (run_command sends
 * up to 64 KiB every 100 ms); kept whole, 27 MB of it stalled the tab for
 * 33 s, each chunk redrawing all that came before.
 */
export const maxStreamed = 64 << 10;

/**
 * streamed adds chunk to out ({text, dropped}, or undefined for none yet),
 * a call's streamed output as the page keeps it: its last max characters,
 * and how many came before them.
 */
export function streamed(out, chunk, max = maxStreamed) {
  let text = (out ? out.text : "") + chunk;
  let dropped = out ? out.dropped : 0;
  if (text.length > max) {
    dropped += text.length - max;
    text = text.slice(text.length - max);
  }
  return { text, dropped };
}
