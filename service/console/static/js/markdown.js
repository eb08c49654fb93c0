// A safe subset of Markdown for what tools say of themselves (OpenAPI
// summaries and descriptions, MCP tools', proto comments): paragraphs,
// headings, lists, block quotes, code blocks and spans, emphasis, and
// links to http(s) URLs only. parse reads text into a small tree of plain
// objects; render makes DOM nodes of it with el(), whose text is always a
// text node: nothing in a description is ever parsed as HTML. Raw HTML is
// shown as the text it is, and a link to anything but an http or https
// URL is shown as its text alone.
import { el } from "./dom.js";

// Bounds, so that any description renders quickly: what lies past maxText
// is shown as plain text; a closing delimiter is looked for at most
// maxScan characters ahead, and a paragraph spends at most maxSteps
// looking for them (then the rest of it is text); lists and quotes nest at
// most maxDepth deep.
const maxText = 32 << 10;
const maxScan = 2000;
const maxSteps = 200_000;
const maxDepth = 8;

/**
 * parse returns text's blocks: {t: "p"|"h", c: inlines}, {t: "code", text},
 * {t: "hr"}, {t: "quote", c: blocks}, {t: "ul"|"ol", start, items: [blocks]}.
 * Inlines are strings or {t: "code", text}, {t: "em"|"strong", c},
 * {t: "a", href, c} and {t: "br"}.
 */
export function parse(text) {
  text = String(text ?? "").replace(/\r\n?/g, "\n");
  let rest = "";
  if (text.length > maxText) {
    rest = text.slice(maxText);
    text = text.slice(0, maxText);
  }
  const out = blocks(text.split("\n"), 0);
  if (rest) out.push({ t: "p", c: [rest] });
  return out;
}

const fenceRE = /^( {0,3})(`{3,}|~{3,})(.*)$/;
const headingRE = /^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$/;
const ruleRE = /^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$/;
const quoteRE = /^ {0,3}> ?(.*)$/;
const itemRE = /^( {0,3})([-*+]|\d{1,9}[.)])(?:([ \t]+)(.*))?$/;

function blank(line) {
  return line.trim() === "";
}

// startsBlock reports whether line interrupts a paragraph.
function startsBlock(line) {
  if (fenceRE.test(line) || headingRE.test(line) || ruleRE.test(line) || quoteRE.test(line)) return true;
  const m = itemRE.exec(line);
  // An ordered item interrupts a paragraph only when it starts at 1, and
  // an empty item never does (as CommonMark has it).
  return !!m && m[4] !== undefined && m[4].trim() !== "" && (/^[-*+]$/.test(m[2]) || /^1[.)]$/.test(m[2]));
}

function blocks(lines, depth) {
  const out = [];
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    if (blank(line)) {
      i++;
      continue;
    }
    let m;
    if ((m = fenceRE.exec(line)) && !(m[2][0] === "`" && m[3].includes("`"))) {
      const indent = m[1].length;
      const fence = m[2];
      const code = [];
      i++;
      while (i < lines.length) {
        const close = /^ {0,3}(`{3,}|~{3,})[ \t]*$/.exec(lines[i]);
        if (close && close[1][0] === fence[0] && close[1].length >= fence.length) {
          i++;
          break;
        }
        code.push(lines[i].replace(new RegExp(`^ {0,${indent}}`), ""));
        i++;
      }
      out.push({ t: "code", text: code.join("\n") });
      continue;
    }
    if ((m = headingRE.exec(line))) {
      out.push({ t: "h", level: m[1].length, c: inline(m[2] || "") });
      i++;
      continue;
    }
    if (ruleRE.test(line)) {
      out.push({ t: "hr" });
      i++;
      continue;
    }
    if (quoteRE.test(line) && depth < maxDepth) {
      const inner = [];
      while (i < lines.length && (m = quoteRE.exec(lines[i]))) {
        inner.push(m[1]);
        i++;
      }
      out.push({ t: "quote", c: blocks(inner, depth + 1) });
      continue;
    }
    if ((m = itemRE.exec(line)) && depth < maxDepth) {
      i = list(lines, i, depth, out);
      continue;
    }
    // A paragraph: up to a blank line or a line that starts a block.
    const para = [line];
    i++;
    while (i < lines.length && !blank(lines[i]) && !startsBlock(lines[i])) para.push(lines[i++]);
    out.push({ t: "p", c: inline(para.map((l) => l.replace(/^[ \t]+/, "")).join("\n")) });
  }
  return out;
}

// list reads the list starting at lines[i] into out and returns the index
// of the first line after it.
function list(lines, i, depth, out) {
  const first = itemRE.exec(lines[i]);
  const ordered = /\d/.test(first[2]);
  const delim = first[2].slice(-1);
  const node = { t: ordered ? "ol" : "ul", start: ordered ? parseInt(first[2], 10) : 1, items: [] };
  while (i < lines.length) {
    const m = itemRE.exec(lines[i]);
    if (!m || /\d/.test(m[2]) !== ordered || m[2].slice(-1) !== delim) break;
    const spaces = m[3] || " ";
    const width = m[1].length + m[2].length + (spaces.length > 4 ? 1 : spaces.length);
    const item = [m[4] === undefined ? "" : (spaces.length > 4 ? spaces.slice(1) : "") + m[4]];
    i++;
    let sawBlank = false;
    while (i < lines.length) {
      const line = lines[i];
      if (blank(line)) {
        sawBlank = true;
        item.push("");
        i++;
        continue;
      }
      const indent = line.length - line.replace(/^ +/, "").length;
      if (indent >= width) {
        item.push(line.slice(width));
        sawBlank = false;
        i++;
        continue;
      }
      // Not indented enough: a new item, another block, or (straight
      // after a paragraph line) a lazy continuation of it.
      if (sawBlank || startsBlock(line) || itemRE.test(line)) break;
      item.push(line);
      i++;
    }
    while (item.length && item[item.length - 1] === "") item.pop();
    node.items.push(blocks(item, depth + 1));
    if (sawBlank && (i >= lines.length || !itemRE.test(lines[i]))) break;
  }
  out.push(node);
  return i;
}

const punctuation = /[!"#$%&'()*+,\-./:;<=>?@[\\\]^_`{|}~]/;

const autolinkRE = /<([A-Za-z][A-Za-z0-9+.-]{1,31}:[^\s<>]*)>/y;
const urlRE = /https?:\/\/[^\s<>"'`]+/iy;

/**
 * inline parses text into inlines. work is what the paragraph may still
 * spend looking for closing delimiters ({steps}); depth bounds nesting;
 * links are not nested.
 */
function inline(s, work = { steps: maxSteps }, depth = 0, inLink = false) {
  const out = [];
  let buf = "";
  const flush = () => {
    if (buf) out.push(buf);
    buf = "";
  };
  const push = (n) => {
    flush();
    out.push(n);
  };
  let i = 0;
  while (i < s.length) {
    const ch = s[i];
    if (ch === "\\" && i + 1 < s.length) {
      const next = s[i + 1];
      if (next === "\n") {
        push({ t: "br" });
        i += 2;
        continue;
      }
      if (punctuation.test(next)) {
        buf += next;
        i += 2;
        continue;
      }
    }
    if (ch === "`") {
      let n = 1;
      while (s[i + n] === "`") n++;
      const j = closingTicks(s, i + n, n, work);
      if (j < 0) {
        buf += "`".repeat(n);
        i += n;
        continue;
      }
      let code = s.slice(i + n, j).replace(/\n/g, " ");
      if (code.length > 2 && code[0] === " " && code[code.length - 1] === " " && code.trim() !== "") code = code.slice(1, -1);
      push({ t: "code", text: code });
      i = j + n;
      continue;
    }
    if (ch === "&") {
      const e = entity(s, i);
      if (e) {
        buf += e.text;
        i += e.length;
        continue;
      }
    }
    if (!inLink && ch === "<") {
      autolinkRE.lastIndex = i;
      const m = autolinkRE.exec(s);
      if (m && m[0].length <= maxScan) {
        const href = safeHref(m[1]);
        push(href ? { t: "a", href, c: [m[1]] } : m[1]);
        i += m[0].length;
        continue;
      }
    }
    if (!inLink && ch === "[") {
      const l = link(s, i, work, depth);
      if (l) {
        flush();
        if (l.href) out.push({ t: "a", href: l.href, c: l.c });
        else out.push(...l.c);
        i = l.end;
        continue;
      }
    }
    if ((ch === "*" || ch === "_") && depth < maxDepth) {
      const e = emphasis(s, i, work, depth, inLink);
      if (e) {
        push(e.node);
        i = e.end;
        continue;
      }
      // A run that opens nothing is text, all of it.
      let n = 1;
      while (s[i + n] === ch) n++;
      buf += s.slice(i, i + n);
      i += n;
      continue;
    }
    if (!inLink && (ch === "h" || ch === "H") && !/[A-Za-z0-9]/.test(s[i - 1] || "")) {
      urlRE.lastIndex = i;
      const m = urlRE.exec(s);
      if (m && m[0].length <= maxScan) {
        let url = m[0];
        // Trailing punctuation ends the sentence, not the URL; so does a
        // ")" that closes nothing inside it.
        for (;;) {
          const last = url[url.length - 1];
          if (/[.,:;!?*_'"]/.test(last)) url = url.slice(0, -1);
          else if (last === ")" && (url.match(/\(/g) || []).length < (url.match(/\)/g) || []).length) url = url.slice(0, -1);
          else break;
        }
        const href = safeHref(url);
        if (href) {
          push({ t: "a", href, c: [url] });
          i += url.length;
          continue;
        }
      }
    }
    if (ch === " " || ch === "\n") {
      // Spaces before a line's end are no text: two or more make a
      // hard break; a line's end alone is a space.
      let j = i;
      while (s[j] === " ") j++;
      if (s[j] !== "\n") {
        buf += s.slice(i, j);
        i = j;
        continue;
      }
      if (j - i >= 2) push({ t: "br" });
      else buf += " ";
      i = j + 1;
      while (s[i] === " " || s[i] === "\t") i++;
      continue;
    }
    buf += ch;
    i++;
  }
  flush();
  return out;
}

function closingTicks(s, from, n, work) {
  const end = Math.min(s.length, from + maxScan);
  for (let j = s.indexOf("`", from); j >= 0 && j < end; j = s.indexOf("`", j)) {
    let k = 0;
    while (s[j + k] === "`") k++;
    if (k === n) {
      work.steps -= j - from;
      return j;
    }
    j += k;
  }
  work.steps -= end - from;
  return -1;
}

// emphasis reads *em*, **strong** (or with _) at s[i], or returns null.
// An opener is followed by a non-space, a closer preceded by one; "_"
// inside a word (snake_case names) is never emphasis.
function emphasis(s, i, work, depth, inLink) {
  if (work.steps <= 0) return null;
  const ch = s[i];
  let n = 1;
  while (s[i + n] === ch) n++;
  const wordy = /[\p{L}\p{N}]/u;
  if (ch === "_" && wordy.test(s[i - 1] || "")) return null;
  const after = s[i + n];
  if (after === undefined || /\s/.test(after)) return null;
  for (const size of n >= 2 ? [2, 1] : [1]) {
    const start = i + size;
    const end = Math.min(s.length, start + maxScan);
    work.steps -= end - start;
    for (let j = s.indexOf(ch, start + 1); j >= 0 && j < end; j = s.indexOf(ch, j + 1)) {
      let k = 0;
      while (s[j + k] === ch) k++;
      if (/\s/.test(s[j - 1]) || k < size || (ch === "_" && wordy.test(s[j + k] || ""))) {
        j += k - 1;
        continue;
      }
      // Nested emphasis of the same character closes at its own run.
      if (size === 1 && k === 2 && n === 1) {
        j += k - 1;
        continue;
      }
      // Of a longer closing run, the last characters close this one
      // (***both***: strong around em).
      const inner = s.slice(start, j + k - size);
      if (!inner) break;
      return { node: { t: size === 2 ? "strong" : "em", c: inline(inner, work, depth + 1, inLink) }, end: j + k };
    }
  }
  return null;
}

// link reads [label](destination "title") at s[i]: {c, href, end}, href
// null when the destination is not an http(s) URL; null when it is no
// link at all.
function link(s, i, work, depth) {
  if (work.steps <= 0) return null;
  let level = 0;
  let j = i;
  const end = Math.min(s.length, i + maxScan);
  work.steps -= end - i;
  for (; j < end; j++) {
    const c = s[j];
    if (c === "\\") {
      j++;
      continue;
    }
    if (c === "[") level++;
    else if (c === "]" && --level === 0) break;
  }
  if (j >= end || s[j + 1] !== "(") return null;
  const label = s.slice(i + 1, j);
  let k = j + 2;
  while (s[k] === " " || s[k] === "\n") k++;
  let dest = "";
  if (s[k] === "<") {
    const close = s.indexOf(">", k);
    if (close < 0 || close > end) return null;
    dest = s.slice(k + 1, close);
    k = close + 1;
  } else {
    let parens = 0;
    const from = k;
    for (; k < end; k++) {
      const c = s[k];
      if (c === "\\") {
        k++;
        continue;
      }
      if (/\s/.test(c)) break;
      if (c === "(") parens++;
      else if (c === ")") {
        if (parens === 0) break;
        parens--;
      }
    }
    dest = s.slice(from, k);
  }
  while (s[k] === " " || s[k] === "\n") k++;
  if (s[k] === '"' || s[k] === "'") {
    const close = s.indexOf(s[k], k + 1);
    if (close < 0 || close > end) return null;
    k = close + 1;
    while (s[k] === " " || s[k] === "\n") k++;
  }
  if (s[k] !== ")") return null;
  const c = inline(label, work, depth + 1, true);
  return { c: c.length ? c : [dest], href: safeHref(decodeEntities(dest.replace(/\\([!-/:-@[-`{-~])/g, "$1"))), end: k + 1 };
}

/** safeHref is url as an absolute http(s) URL, or null for any other. */
export function safeHref(url) {
  let u;
  try {
    u = new URL(String(url).trim());
  } catch {
    return null;
  }
  return u.protocol === "http:" || u.protocol === "https:" ? u.href : null;
}

const named = {
  amp: "&", lt: "<", gt: ">", quot: '"', apos: "'", nbsp: "\u00a0", copy: "©", reg: "®", trade: "™",
  hellip: "…", mdash: "—", ndash: "–", lsquo: "‘", rsquo: "’", ldquo: "“", rdquo: "”", bull: "•",
  middot: "·", times: "×", divide: "÷", deg: "°", larr: "←", rarr: "→", le: "≤", ge: "≥", ne: "≠",
};

// entity decodes the character reference at s[i]: {text, length}, or null.
function entity(s, i) {
  const m = /^&(?:#(\d{1,7})|#[xX]([0-9a-fA-F]{1,6})|([A-Za-z]{2,8}));/.exec(s.slice(i, i + 12));
  if (!m) return null;
  if (m[3]) return named[m[3]] ? { text: named[m[3]], length: m[0].length } : null;
  const cp = m[1] ? parseInt(m[1], 10) : parseInt(m[2], 16);
  const ok = cp > 0 && cp <= 0x10ffff && !(cp >= 0xd800 && cp <= 0xdfff);
  return { text: ok ? String.fromCodePoint(cp) : "\ufffd", length: m[0].length };
}

function decodeEntities(s) {
  let out = "";
  for (let i = 0; i < s.length; ) {
    const e = s[i] === "&" ? entity(s, i) : null;
    if (e) {
      out += e.text;
      i += e.length;
    } else out += s[i++];
  }
  return out;
}

/** text is the plain text of inlines or blocks. */
export function text(nodes) {
  let out = "";
  for (const n of nodes) {
    if (typeof n === "string") out += n;
    else if (n.t === "br") out += " ";
    else if (n.t === "code") out += n.text;
    else if (n.items) out += n.items.map((b) => text(b)).join(" ");
    else if (n.c) out += text(n.c);
  }
  return out;
}

/**
 * summary is the first paragraph (or heading) of text as plain text, cut
 * at about max characters: an OpenAPI operation's summary, the first line
 * of a description.
 */
export function summary(s, max = 160) {
  s = String(s || "").replace(/^\s+/, "").slice(0, 4 * max);
  const blank = s.search(/\n[ \t]*\n/);
  const first = parse(blank > 0 ? s.slice(0, blank) : s).find((b) => b.t === "p" || b.t === "h");
  let out = first ? text(first.c).replace(/\s+/g, " ").trim() : "";
  if (out.length > max) {
    const cut = out.lastIndexOf(" ", max);
    out = out.slice(0, cut > max / 2 ? cut : max).trimEnd() + "…";
  }
  return out;
}

function inlineNode(n) {
  if (typeof n === "string") return n;
  switch (n.t) {
    case "code": return el("code", {}, n.text);
    case "em": return el("em", {}, n.c.map(inlineNode));
    case "strong": return el("strong", {}, n.c.map(inlineNode));
    case "a": return el("a", { href: n.href, rel: "noopener noreferrer", target: "_blank" }, n.c.map(inlineNode));
    case "br": return el("br");
  }
  return "";
}

function blockNode(b) {
  switch (b.t) {
    case "p": return el("p", {}, b.c.map(inlineNode));
    case "h": return el("p", { class: "md-h" }, el("strong", {}, b.c.map(inlineNode)));
    case "code": return el("pre", { class: "md-code" }, el("code", {}, b.text));
    case "hr": return el("hr");
    case "quote": return el("blockquote", {}, b.c.map(blockNode));
    case "ul":
    case "ol":
      return el(b.t, { start: b.t === "ol" && b.start !== 1 ? String(b.start) : undefined },
        b.items.map((item) => el("li", {}, item.length === 1 && item[0].t === "p" ? item[0].c.map(inlineNode) : item.map(blockNode))));
  }
  return "";
}

/** render returns text's blocks as DOM nodes (an array). */
export function render(s) {
  return parse(s).map(blockNode);
}
