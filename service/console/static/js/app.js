// The console's pages over the public contract (rpc.js): Tools, Try it,
// Watch it run and Server. Everything the server sends is shown as text.
import { el, fmtSeconds, pretty, seconds, streamed, uid } from "./dom.js";
import { render as markdown, summary } from "./markdown.js";
import { search, sourceText } from "./match.js";
import { picker } from "./picker.js";
import { RPCError, admin, listAll, serverStream, setToken, token, tools as toolService, unary } from "./rpc.js";
import { form, validate } from "./schema.js";
import { elapsed, span, when } from "./time.js";

const $ = (id) => document.getElementById(id);

const state = {
  tools: [],
  byName: new Map(),
  sourceOf: new Map(), // tool name → its source's group label, from the server view
  ownerOf: new Map(), // tool name → its owner in the registry ("openapi:github"), from the server view
  revision: "",
  calls: [], // the batch being built: {key, name, callId, args, raw, timeout}
  nextCall: 1,
  run: null, // the batch being watched
};

// ---- status line and sign-in ------------------------------------------------

function say(text, isError) {
  const s = $("status");
  s.textContent = text;
  s.classList.toggle("error", !!isError);
}

function explain(err) {
  if (err instanceof RPCError) {
    if (err.code === "unauthenticated") return `Refused: ${err.message}. Sign in with a token this server accepts.`;
    return `${err.code}: ${err.message}`;
  }
  return String(err && err.message ? err.message : err);
}

async function signIn(ev) {
  ev.preventDefault();
  setToken($("token").value.trim());
  $("token").value = "";
  await refreshTools();
}

function signOut() {
  setToken("");
  state.tools = [];
  state.byName.clear();
  renderTools();
  renderAddTool();
  say("Signed out.");
}

// ---- navigation -------------------------------------------------------------

const pages = ["tools", "try", "watch", "server"];

function show(page) {
  for (const p of pages) {
    $(`page-${p}`).hidden = p !== page;
    const b = $(`nav-${p}`);
    if (p === page) b.setAttribute("aria-current", "page");
    else b.removeAttribute("aria-current");
  }
  if (page === "server") refreshServer();
  $("main").focus({ preventScroll: true });
}

// ---- Tools ------------------------------------------------------------------

const sourceNames = {
  TOOL_SOURCE_BUILTIN: "Built-in",
  TOOL_SOURCE_HTTP: "HTTP",
  TOOL_SOURCE_MCP: "MCP servers",
  TOOL_SOURCE_REMOTE: "Remote toolwire servers",
};

// kindNames name a source by its configuration key, for the groups of the
// Tools page when the server view says which source serves which tool.
const kindNames = {
  builtin: () => "Built-in",
  http_tools: () => "HTTP tools",
  openapi: (n) => `OpenAPI: ${n}`,
  mcp_servers: (n) => `MCP server: ${n}`,
  remotes: (n) => `Remote toolwire: ${n}`,
  grpc_services: (n) => `gRPC service: ${n}`,
};

// ownerIDs name a source as the registry does (its owner of its tools),
// by its configuration key: what the tool search matches as its source.
const ownerIDs = {
  builtin: () => "builtin",
  http_tools: () => "http",
  openapi: (n) => `openapi:${n}`,
  mcp_servers: (n) => `mcp:${n}`,
  remotes: (n) => `remote:${n}`,
  grpc_services: (n) => `grpc:${n}`,
};

// groupOf is the group of tool t: its source as the server view names it,
// else its kind as ListTools gives it.
function groupOf(t) {
  return state.sourceOf.get(t.name) || sourceNames[t.source] || "Other";
}

// kinds are the contract's ToolSource values as the search names them (an
// unset source is a built-in tool's, as in tools.Source).
const kinds = { TOOL_SOURCE_BUILTIN: "builtin", TOOL_SOURCE_UNSPECIFIED: "builtin", TOOL_SOURCE_HTTP: "http", TOOL_SOURCE_MCP: "mcp", TOOL_SOURCE_REMOTE: "remote" };

// searchSource is t's source as the search matches it: "http openapi:github".
function searchSource(t) {
  return sourceText(t.source ? kinds[t.source] || "other" : "builtin", state.ownerOf.get(t.name));
}

/** listTools asks ListTools for every tool the caller may call (rpc.js listAll). */
function listTools() {
  return listAll((req) => unary(toolService, "ListTools", req));
}

async function refreshTools() {
  try {
    const resp = await listTools();
    state.tools = resp.tools;
    state.revision = resp.revision;
    state.byName = new Map(state.tools.map((t) => [t.name, t]));
    let who = "";
    state.sourceOf = new Map();
    state.ownerOf = new Map();
    try {
      const st = await unary(admin, "GetServerStatus", {});
      who = st.callerId ? ` as ${st.callerId}` : "";
      for (const s of st.sources || []) {
        const label = (kindNames[s.kind] || ((n) => `${s.kind}: ${n}`))(s.name);
        const owner = (ownerIDs[s.kind] || ((n) => `${s.kind}:${n}`))(s.name);
        for (const name of s.tools || []) {
          state.sourceOf.set(name, label);
          state.ownerOf.set(name, owner);
        }
      }
    } catch {
      // the view is optional: a server without it still lists tools
    }
    say(`Signed in${who}: ${state.tools.length} tools at revision ${state.revision}.`);
  } catch (err) {
    if (err instanceof RPCError && err.code === "unauthenticated") setToken("");
    state.tools = [];
    state.byName.clear();
    say(explain(err), true);
    if (err instanceof RPCError && err.code === "unauthenticated") $("token").focus();
  }
  renderTools();
  renderAddTool();
  renderCalls();
  // The first answer drawn (the tools, or the refusal): what the page's
  // first-render time is measured to.
  if (performance.getEntriesByName("toolwire:first-render").length === 0) performance.mark("toolwire:first-render");
}

function badges(a) {
  a = a || {};
  return [
    a.readOnly && el("span", { class: "badge read-only" }, "read-only"),
    a.destructive && el("span", { class: "badge destructive" }, "destructive"),
    a.idempotent && el("span", { class: "badge idempotent" }, "idempotent"),
    a.openWorld && el("span", { class: "badge open-world" }, "open world"),
  ];
}

/** find is the tools query matches, best first: the one search of the page. */
function find(query) {
  return search(state.tools, query, searchSource);
}

/** summaryOf is what a tool's row says of it: its title, else its description's first paragraph. */
function summaryOf(t) {
  return t.title || summary(t.description);
}

// The Tools page draws at most toolRows rows at a time, more as the user
// asks: a registry holds up to 10,000 tools from each MCP server, and
// 10,003 rows took the tab 5 to 7 s of layout for each key typed in the
// search. What the search finds is counted whole.
const toolRows = 200;
let toolsDrawn = toolRows;

function renderTools() {
  const list = $("tool-list");
  list.replaceChildren();
  const shown = find($("tool-search").value);
  const drawn = shown.slice(0, toolsDrawn);
  $("tool-count").textContent = `${shown.length} of ${state.tools.length} tools` + (drawn.length < shown.length ? ` (the first ${drawn.length} shown)` : "");
  const counts = new Map();
  for (const t of shown) counts.set(groupOf(t), (counts.get(groupOf(t)) || 0) + 1);
  const groups = new Map();
  for (const t of drawn) {
    const g = groupOf(t);
    if (!groups.has(g)) groups.set(g, []);
    groups.get(g).push(t);
  }
  for (const [g, ts] of groups) {
    const section = el("section", { class: "group", "aria-label": g }, el("h3", {}, `${g} (${counts.get(g)})`));
    for (const t of ts) section.append(toolCard(t));
    list.append(section);
  }
  const rest = shown.length - drawn.length;
  if (rest > 0) {
    list.append(el("p", { class: "bar more" }, `${rest} more not shown: narrow the search, or `,
      el("button", { type: "button", id: "more-tools", onclick: () => {
        toolsDrawn += toolRows;
        renderTools();
        list.querySelectorAll("details.tool > summary")[drawn.length]?.focus();
      } }, `show ${Math.min(rest, toolRows)} more`)));
  }
}

/** searchTools draws the tools the search finds, from the first. */
function searchTools() {
  toolsDrawn = toolRows;
  renderTools();
}

// toolCard is a tool's row; its body (the description, the schemas) is
// made when it is first opened, so a catalog of thousands draws quickly.
function toolCard(t) {
  const sum = summaryOf(t);
  const card = el("details", { class: "tool", dataset: { name: t.name } },
    el("summary", {},
      el("span", { class: "tname" }, t.name),
      sum ? el("span", { class: "ttitle" }, sum) : null,
      badges(t.annotations)));
  card.addEventListener("toggle", () => {
    if (!card.open || card.querySelector(".body")) return;
    card.append(el("div", { class: "body" },
      el("div", { class: "desc-text md" }, t.description ? markdown(t.description) : el("p", {}, "(no description)")),
      t.timeout ? el("p", { class: "hint" }, `Timeout: ${fmtSeconds(seconds(t.timeout))}`) : null,
      el("h4", {}, "Input schema"),
      el("pre", { class: "schema" }, pretty(t.inputSchema) || "{}"),
      t.outputSchema ? [el("h4", {}, "Output schema"), el("pre", { class: "schema" }, pretty(t.outputSchema))] : null,
      el("button", { type: "button", class: "try", onclick: () => { addCall(t.name); show("try"); } }, `Try ${t.name}`)));
  });
  return card;
}

// ---- Try it -----------------------------------------------------------------

// toolPicker makes a searchable picker of the tools (picker.js over find).
function toolPicker(opts) {
  return picker({
    ...opts,
    find,
    known: (name) => state.byName.has(name),
    describe: (t) => ({ summary: summaryOf(t), source: groupOf(t) }),
  });
}

let addPicker;

function renderAddTool() {
  addPicker?.refresh();
}

/** addChosen adds a call of the tool the add-call picker names, or says why not. */
function addChosen() {
  const name = addPicker.current();
  const q = addPicker.input.value.trim();
  if (!name) {
    $("try-problems").textContent = q ? `No tool matches "${q}".` : "Type a tool's name, or words of its title or description, then pick it.";
    addPicker.input.focus();
    return;
  }
  addPicker.close();
  addPicker.input.value = name;
  addCall(name);
}

function schemaOf(name) {
  const t = state.byName.get(name);
  if (!t || !t.inputSchema) return { type: "object" };
  try {
    return JSON.parse(t.inputSchema);
  } catch {
    return { type: "object" };
  }
}

function addCall(name) {
  if (!name) return;
  state.calls.push({ key: uid("call"), name, callId: `call_${state.nextCall++}`, args: {} });
  renderCalls();
  const cards = document.querySelectorAll("#calls > li");
  const last = cards[cards.length - 1];
  if (last) last.querySelector("input, select, textarea")?.focus();
}

function move(i, by) {
  const j = i + by;
  if (j < 0 || j >= state.calls.length) return;
  [state.calls[i], state.calls[j]] = [state.calls[j], state.calls[i]];
  renderCalls();
  document.querySelectorAll("#calls > li")[j]?.querySelector(by < 0 ? ".up" : ".down")?.focus();
}

function renderCalls() {
  const ol = $("calls");
  ol.replaceChildren(...state.calls.map((c, i) => callCard(c, i)));
  if (state.calls.length === 0) ol.append(el("li", { class: "hint" }, "No calls yet: pick a tool below and add it."));
  checkCalls();
}

function callCard(c, i) {
  const schema = schemaOf(c.name);
  const problems = el("p", { class: "problems", "aria-live": "polite" });
  const rawID = uid("raw");
  const raw = el("textarea", { id: rawID, rows: 5, class: "json raw", spellcheck: "false" });
  const formBox = el("div", { class: "form" });
  const check = () => {
    const ps = c.raw !== undefined ? [{ path: "JSON", message: c.raw }] : validate(schema, c.args);
    problems.textContent = ps.map((p) => `${p.path} ${p.message}`).join("\n");
    problems.classList.toggle("ok", ps.length === 0);
    if (ps.length === 0) problems.textContent = "Arguments are valid.";
    c.problems = ps;
    checkCalls();
  };
  const changed = () => {
    if (document.activeElement !== raw) raw.value = JSON.stringify(c.args, null, 2);
    c.raw = undefined;
    raw.removeAttribute("aria-invalid");
    check();
  };
  const renderForm = () => formBox.replaceChildren(form(schema, c.args, changed));
  raw.addEventListener("input", () => {
    try {
      const v = JSON.parse(raw.value || "{}");
      if (v === null || typeof v !== "object" || Array.isArray(v)) throw new Error("the arguments must be a JSON object");
      c.args = v;
      c.raw = undefined;
      raw.removeAttribute("aria-invalid");
      renderForm();
    } catch (e) {
      c.raw = e.message;
      raw.setAttribute("aria-invalid", "true");
    }
    check();
  });
  renderForm();
  raw.value = JSON.stringify(c.args, null, 2);
  const toolID = uid("tool");
  const idID = uid("cid");
  const toID = uid("to");
  const toolPick = toolPicker({ id: toolID, value: c.name, onPick: (name) => {
    if (name === c.name) return;
    c.name = name;
    c.args = {};
    renderCalls();
  } });
  toolPick.input.classList.add("tool-select");
  const idInput = el("input", { id: idID, type: "text", class: "call-id", value: c.callId });
  idInput.addEventListener("input", () => {
    c.callId = idInput.value;
    checkCalls();
  });
  const timeoutInput = el("input", { id: toID, type: "number", class: "call-timeout", min: "0", step: "any", placeholder: "tool's", value: c.timeout ?? "" });
  timeoutInput.addEventListener("input", () => {
    const v = Number(timeoutInput.value);
    c.timeout = timeoutInput.value === "" || !(v > 0) ? undefined : v;
    timeoutInput.toggleAttribute("aria-invalid", timeoutInput.value !== "" && !(v > 0));
  });
  const t = state.byName.get(c.name);
  const sum = t ? summaryOf(t) : "";
  const li = el("li", { class: "call", dataset: { key: c.key, tool: c.name } },
    el("div", { class: "head" },
      el("strong", {}, `#${i + 1}`),
      el("label", { for: toolID }, "Tool"), toolPick.box,
      el("label", { for: idID }, "Call ID"), idInput,
      el("label", { for: toID }, "Timeout (s)"), timeoutInput,
      el("button", { type: "button", class: "small up", "aria-label": `move call ${i + 1} up`, disabled: i === 0, onclick: () => move(i, -1) }, "↑"),
      el("button", { type: "button", class: "small down", "aria-label": `move call ${i + 1} down`, disabled: i === state.calls.length - 1, onclick: () => move(i, 1) }, "↓"),
      el("button", { type: "button", class: "small remove", "aria-label": `remove call ${i + 1}`, onclick: () => { state.calls.splice(i, 1); renderCalls(); } }, "Remove")),
    !t ? el("p", { class: "problems" }, `${c.name} is not among the tools listed.`) : sum ? el("p", { class: "hint tsum" }, sum) : null,
    el("div", { class: "cols" },
      el("div", {}, el("h4", {}, "Form"), formBox),
      el("div", {}, el("label", { for: rawID }, el("h4", {}, "JSON")), raw)),
    problems);
  queueMicrotask(check);
  return li;
}

/** checkCalls says what stops the batch from being sent as it is. */
function checkCalls() {
  const out = [];
  const ids = new Set();
  for (const [i, c] of state.calls.entries()) {
    if (!c.callId) out.push(`call #${i + 1} has no call ID`);
    else if (ids.has(c.callId)) out.push(`call ID ${c.callId} is used twice`);
    ids.add(c.callId);
    if (c.raw !== undefined) out.push(`call #${i + 1}: its JSON does not parse`);
  }
  // A call whose schema was too costly to check here is the server's to judge.
  const invalid = state.calls.filter((c) => c.problems && c.problems.some((p) => !p.unchecked)).length;
  $("try-problems").textContent = out.join("\n") + (invalid && !out.length ? `${invalid} call(s) have arguments the schema refuses; the server will answer INVALID_ARGUMENTS for them.` : "");
  $("run").disabled = state.calls.length === 0 || out.length > 0;
}

function batchRequest() {
  const opts = {};
  if ($("opt-sequential").checked) opts.sequential = true;
  if ($("opt-parallel").value) opts.maxParallel = Number($("opt-parallel").value);
  if ($("opt-stop").checked) opts.stopOnError = true;
  if ($("opt-timeout").value) opts.timeout = `${Number($("opt-timeout").value)}s`;
  if ($("opt-detach").checked) opts.detach = true;
  const req = { calls: state.calls.map((c) => ({ callId: c.callId, name: c.name, arguments: JSON.stringify(c.args), timeout: c.timeout ? `${c.timeout}s` : undefined })) };
  if ($("opt-session").value) req.sessionId = $("opt-session").value;
  if (Object.keys(opts).length) req.options = opts;
  return req;
}

// ---- Watch it run -----------------------------------------------------------

function outcomeOf(r) {
  const k = (r.errorKind || "").replace("ERROR_KIND_", "");
  if (!r.isError && (!k || k === "UNSPECIFIED")) return { state: "ok", text: "OK" };
  switch (k) {
    case "CANCELLED": return { state: "cancelled", text: k };
    case "SKIPPED": return { state: "skipped", text: k };
    case "TIMEOUT": return { state: "timeout", text: k };
  }
  return { state: "error", text: k || "ERROR" };
}

async function runBatch() {
  if (state.run && state.run.running) return;
  const req = batchRequest();
  const run = {
    req, running: true, batchId: "", calls: new Map(), t0: performance.now(), abort: new AbortController(), rows: new Map(),
  };
  state.run = run;
  // What the page knows of each call's time: its own timeout and its
  // tool's (the server's limit, which may be shorter, is not known here).
  req.calls.forEach((c, i) => {
    const t = state.byName.get(c.name);
    const limits = [seconds(c.timeout), t ? seconds(t.timeout) : 0].filter((x) => x > 0);
    run.calls.set(c.callId, { id: c.callId, name: c.name, index: i, state: "waiting", timeout: limits.length ? 1000 * Math.min(...limits) : undefined });
  });
  run.batchTimeout = req.options && req.options.timeout ? 1000 * seconds(req.options.timeout) : undefined;
  $("timeline").replaceChildren();
  $("results").replaceChildren();
  $("batch-state").textContent = "Sending the batch…";
  delete $("batch-state").dataset.finished;
  $("cancel").disabled = false;
  show("watch");
  const tick = setInterval(() => drawBars(run), 100);
  try {
    await serverStream(toolService, "ExecuteBatch", req, (ev) => onEvent(run, ev), run.abort.signal);
    if (!run.finished) $("batch-state").textContent = "The stream ended before BatchFinished.";
  } catch (err) {
    $("batch-state").textContent = run.aborted ? "Cancelled: the stream was closed." : `The batch failed: ${explain(err)}`;
  } finally {
    run.running = false;
    clearInterval(tick);
    drawBars(run);
    $("cancel").disabled = true;
  }
}

function onEvent(run, ev) {
  if (ev.accepted) {
    run.batchId = ev.accepted.batchId;
    run.t0 = performance.now();
    $("batch-state").textContent = `Batch ${run.batchId} running (revision ${ev.accepted.revision || state.revision}).`;
    drawLanes(run, ev.accepted.lanes || []);
  } else if (ev.started) {
    const c = run.calls.get(ev.started.callId);
    if (c) {
      c.start = performance.now();
      c.state = "running";
      paintRow(run, c, "running");
    }
  } else if (ev.progress) {
    const p = ev.progress;
    const c = run.calls.get(p.callId);
    const row = c && run.rows.get(c.id);
    if (!row) return;
    if (p.total !== undefined && p.progress !== undefined) {
      row.bar.hidden = false;
      row.bar.max = Number(p.total) || 1;
      row.bar.value = Number(p.progress);
      row.bar.setAttribute("aria-label", `${c.id} progress`);
    }
    if (p.message) row.outcome.textContent = p.message;
    if (p.output) {
      c.output = streamed(c.output, p.output);
      row.output.hidden = false;
      row.output.textContent = (c.output.dropped ? `[${c.output.dropped} characters of output before these not shown]\n` : "") + c.output.text;
    }
  } else if (ev.awaitingApproval) {
    const a = ev.awaitingApproval;
    const c = run.calls.get(a.callId);
    if (c) paintRow(run, c, "approval", "awaiting approval");
    $("results").append(approvalCard(run, a));
  } else if (ev.result) {
    const r = ev.result;
    document.querySelector(`#results .approval[data-call-id="${CSS.escape(r.callId)}"]`)?.remove();
    const c = run.calls.get(r.callId);
    if (c) {
      c.end = performance.now();
      if (c.start === undefined) c.start = c.end;
      const o = outcomeOf(r);
      c.state = o.state;
      paintRow(run, c, o.state, `${o.text} · ${fmtSeconds(seconds(r.duration))}`);
      const row = run.rows.get(c.id);
      if (row && !row.bar.hidden && o.state === "ok") row.bar.value = row.bar.max;
    }
    $("results").append(resultCard(r));
  } else if (ev.finished) {
    const f = ev.finished;
    run.finished = f;
    const text = `Batch ${f.batchId} finished in ${fmtSeconds(seconds(f.duration))}: ${f.succeeded || 0} succeeded, ${f.failed || 0} failed, ${f.skipped || 0} skipped, ${f.cancelled || 0} cancelled, ${f.replayed || 0} replayed.`;
    $("batch-state").textContent = text;
    $("batch-state").dataset.finished = "true";
    remember({ id: f.batchId, at: new Date().toISOString(), calls: run.calls.size, summary: text });
  }
}

function drawLanes(run, lanes) {
  const box = $("timeline");
  box.replaceChildren();
  delete $("batch-state").dataset.finished;
  for (const lane of lanes) {
    const rows = el("div", { role: "list" });
    const group = el("div", { class: "lane", role: "group", "aria-label": `lane ${lane.index || 0}` },
      el("div", { class: "lane-head" }, `Lane ${(lane.index || 0) + 1} · ${lane.parallel ? "parallel" : "one call"}`), rows);
    for (const id of lane.callIds || []) {
      const c = run.calls.get(id);
      if (!c) continue;
      const fill = el("div", { class: "barfill" });
      const deadline = el("div", { class: "deadline", hidden: true });
      const outcome = el("span", { class: "outcome" }, "waiting");
      const time = el("span", { class: "elapsed" });
      const bar = el("progress", { hidden: true });
      const output = el("pre", { class: "output", hidden: true });
      const row = el("div", { class: "row", role: "listitem", dataset: { callId: id, state: "waiting" } },
        el("span", { class: "who", title: `${id} · ${c.name}` }, `${id} · ${c.name}`),
        el("div", { class: "track", "aria-hidden": "true" }, fill, deadline),
        el("div", { class: "when" }, outcome, time), bar);
      rows.append(row, output);
      run.rows.set(id, { row, fill, deadline, outcome, time, bar, output });
    }
    box.append(group);
  }
}

function paintRow(run, c, st, text) {
  const r = run.rows.get(c.id);
  if (!r) return;
  r.row.dataset.state = st;
  r.outcome.textContent = text || st;
  if (st !== "running") r.bar.hidden = r.bar.hidden || false;
  drawBars(run);
}

// drawBars draws each call's bar on one time scale (time.js span): while
// the batch runs the tracks reach the running calls' deadlines, so a bar
// shows the time a call has used of what it has, and each running call
// says how long it has run of its timeout.
function drawBars(run) {
  const now = performance.now() - run.t0;
  const calls = [...run.calls.values()].map((c) => {
    const start = c.start === undefined ? undefined : c.start - run.t0;
    let timeout = c.timeout;
    if (run.batchTimeout !== undefined && start !== undefined) timeout = Math.min(timeout ?? Infinity, Math.max(run.batchTimeout - start, 0));
    return { c, start, end: c.end === undefined ? undefined : c.end - run.t0, timeout };
  });
  const total = span(calls, now, run.running);
  for (const x of calls) {
    const r = run.rows.get(x.c.id);
    if (!r || x.start === undefined) continue;
    const end = x.end ?? now;
    r.fill.style.left = `${(100 * x.start) / total}%`;
    r.fill.style.width = `${Math.max((100 * (end - x.start)) / total, 0.5)}%`;
    const live = run.running && x.end === undefined && x.c.state === "running";
    r.deadline.hidden = !(live && x.timeout !== undefined);
    if (!r.deadline.hidden) r.deadline.style.left = `${Math.min((100 * (x.start + x.timeout)) / total, 100)}%`;
    r.time.textContent = live ? elapsed(now - x.start, x.timeout) : "";
  }
}

function resultCard(r) {
  const o = outcomeOf(r);
  let details = null;
  let sandbox = null;
  if (r.details) {
    try {
      const d = JSON.parse(r.details);
      if (d && typeof d === "object" && d.sandbox) sandbox = d.sandbox;
    } catch {
      // shown as text below
    }
    details = pretty(r.details);
  }
  return el("article", { class: "result" + (r.isError ? " is-error" : ""), dataset: { callId: r.callId, state: o.state } },
    el("h4", {},
      el("span", { class: "mono" }, `${r.callId} · ${r.toolName || ""}`),
      el("span", { class: "badge " + (o.state === "ok" ? "read-only" : "destructive") }, o.text),
      el("span", {}, fmtSeconds(seconds(r.duration))),
      r.replayed ? el("span", { class: "badge idempotent" }, "replayed") : null,
      r.truncated ? el("span", { class: "badge open-world" }, `truncated from ${r.originalSize} bytes`) : null),
    (r.content || []).map((b) => {
      if (b.text) return el("pre", { class: "text" }, b.text.text || "");
      if (b.image) return el("img", { src: `data:${b.image.mimeType || "image/png"};base64,${b.image.data || ""}`, alt: `image returned by ${r.callId}` });
      return el("pre", {}, JSON.stringify(b));
    }),
    r.structuredContent ? [el("h5", {}, "Structured content"), el("pre", {}, pretty(r.structuredContent))] : null,
    sandbox ? [el("h5", {}, "Sandbox"), el("pre", {}, JSON.stringify(sandbox, null, 2))] : null,
    details ? [el("h5", {}, "Details"), el("pre", {}, details)] : null);
}

/**
 * approvalCard shows a call held for a person's decision (a policy's
 * require_approval), with buttons that resolve it: the server decides
 * whether this caller may (its approvers).
 */
function approvalCard(run, a) {
  const msgID = uid("why");
  const why = el("input", { id: msgID, type: "text", placeholder: "optional" });
  const outcome = el("p", { class: "problems", "aria-live": "polite" });
  const resolve = async (approved) => {
    try {
      await unary(toolService, "ResolveApproval", { batchId: run.batchId, callId: a.callId, approved, message: why.value });
      outcome.textContent = approved ? "Approved." : "Denied.";
      outcome.classList.add("ok");
    } catch (err) {
      outcome.textContent = explain(err);
    }
  };
  return el("article", { class: "result approval", dataset: { callId: a.callId } },
    el("h4", {}, el("span", { class: "mono" }, `${a.callId} · ${a.toolName || ""}`), el("span", { class: "badge open-world" }, "awaiting approval")),
    a.reason ? el("p", { class: "desc-text" }, a.reason) : null,
    el("h5", {}, "Arguments"), el("pre", {}, pretty(a.arguments)),
    el("div", { class: "bar" },
      el("label", { for: msgID }, "Message"), why,
      el("button", { type: "button", onclick: () => resolve(true) }, "Approve"),
      el("button", { type: "button", onclick: () => resolve(false) }, "Deny")),
    outcome);
}

async function cancelRun() {
  const run = state.run;
  if (!run || !run.running) return;
  $("cancel").disabled = true;
  if (run.batchId) {
    try {
      await unary(toolService, "CancelBatch", { batchId: run.batchId, reason: "cancelled from the console" });
      $("batch-state").textContent = `Cancelling batch ${run.batchId}…`;
      return;
    } catch (err) {
      say(`CancelBatch: ${explain(err)}; closing the stream instead.`, true);
    }
  }
  run.aborted = true;
  run.abort.abort();
}

// ---- Server -----------------------------------------------------------------

const finishedKey = "toolwire.finished";

function finished() {
  try {
    return JSON.parse(sessionStorage.getItem(finishedKey) || "[]");
  } catch {
    return [];
  }
}

function remember(entry) {
  const list = [entry, ...finished()].slice(0, 20);
  sessionStorage.setItem(finishedKey, JSON.stringify(list));
  renderFinished();
}

/** timeEl shows a timestamp as local time to the millisecond, and how long ago. */
function timeEl(iso) {
  const w = when(iso);
  return w.iso ? el("time", { datetime: w.iso, title: w.title }, w.text) : w.text;
}

function renderFinished() {
  const list = finished();
  $("finished").replaceChildren(list.length
    ? el("ol", { class: "finished" }, list.map((f) => el("li", {}, timeEl(f.at), " ", f.summary)))
    : el("p", { class: "hint" }, "None yet."));
}

function table(head, rows, attrs) {
  // A wide table scrolls inside its box, so the page never scrolls sideways.
  return el("div", { class: "scroll" },
    el("table", attrs || {}, el("thead", {}, el("tr", {}, head.map((h) => el("th", { scope: "col" }, h)))), el("tbody", {}, rows)));
}

// The Server page draws at most serverBatches batches in flight, and
// serverCalls running calls of each: an administrator sees every caller's,
// the oldest 1,000 of them listed (batchCount counts them all), redrawn
// every 2 s; 566 batches of 4 running calls each kept the tab busy 2.8 s
// at a time.
const serverBatches = 100;
const serverCalls = 20;

async function refreshServer() {
  if ($("page-server").hidden) return;
  renderFinished(); // its times say how long ago
  let st;
  try {
    st = await unary(admin, "GetServerStatus", {});
  } catch (err) {
    $("server").replaceChildren(el("p", { class: "problems" }, explain(err)));
    return;
  }
  $("server-time").replaceChildren("as of ", timeEl(st.serverTime || ""), st.allCallers ? " · every caller's batches" : " · your batches");
  const srcRows = (st.sources || []).map((s) => {
    const stName = (s.state || "").replace("SOURCE_STATE_", "").toLowerCase();
    return el("tr", { dataset: { source: `${s.kind}/${s.name}` } },
      el("td", {}, s.kind), el("td", { class: "mono" }, s.name),
      el("td", {}, el("span", { class: `badge state-${stName}` }, stName)),
      el("td", {}, String(s.toolCount || 0)), el("td", {}, s.since ? timeEl(s.since) : ""), el("td", {}, s.lastError || ""));
  });
  const batches = st.batches || [];
  const batchCount = Math.max(st.batchCount || 0, batches.length); // a server before batch_count sends none
  const batchRows = batches.slice(0, serverBatches).map((b) => el("tr", { dataset: { batchId: b.batchId } },
    el("td", { class: "mono" }, b.batchId), el("td", {}, b.callerId || "(anonymous)"), el("td", {}, b.sessionId || ""),
    el("td", {}, String(b.calls || 0)),
    el("td", {}, String(b.callsRunning || 0), (b.running || []).length
      ? el("ul", { class: "running" }, b.running.slice(0, serverCalls).map((c) => el("li", { class: "mono", dataset: { callId: c.callId } }, `${c.callId} · ${c.toolName} · ${fmtSeconds(seconds(c.age))}`)),
        b.running.length > serverCalls ? el("li", { class: "more" }, `and ${b.running.length - serverCalls} more`) : null)
      : null),
    el("td", {}, fmtSeconds(seconds(b.age))), el("td", {}, b.detached ? "yes" : "")));
  const e = st.engine;
  $("server").replaceChildren(el("div", {},
    el("dl", { class: "stats" },
      el("dt", {}, "Revision"), el("dd", { class: "mono" }, st.revision || ""),
      el("dt", {}, "Tools"), el("dd", {}, String(st.toolCount || 0)),
      el("dt", {}, "Signed in as"), el("dd", {}, st.callerId || "(anonymous)")),
    el("h3", {}, "Sources"),
    table(["Kind", "Name", "State", "Tools", "Since", "Last error"], srcRows, { id: "server-sources" }),
    el("h3", {}, `Batches in flight (${batchCount})`),
    batchRows.length ? table(["Batch", "Caller", "Session", "Calls", "Running", "Age", "Detached"], batchRows, { id: "server-batches" }) : el("p", { class: "hint", id: "server-batches" }, "None."),
    batchCount > batchRows.length ? el("p", { class: "hint", id: "server-batches-more" }, `The oldest ${batchRows.length} shown; ${batchCount - batchRows.length} more not shown.`) : null,
    e ? [el("h3", {}, "Engine"), el("dl", { class: "stats" },
      ["batches", "callsRunning", "slotWaiters", "callers", "abandoned", "bufferedBytes", "waitingToReport", "sessionWaiting"].flatMap((k) => [el("dt", {}, k), el("dd", {}, String(e[k] || 0))]))] : null));
}

// ---- start ------------------------------------------------------------------

function start() {
  $("signin").addEventListener("submit", signIn);
  $("signout").addEventListener("click", signOut);
  for (const p of pages) $(`nav-${p}`).addEventListener("click", () => show(p));
  $("tool-search").addEventListener("input", searchTools);
  addPicker = toolPicker({ id: "add-tool", placeholder: "name, title, description or source", onPick: addCall });
  $("add-tool-slot").replaceWith(addPicker.box);
  $("add-call").addEventListener("click", addChosen);
  $("run").addEventListener("click", runBatch);
  $("cancel").addEventListener("click", cancelRun);
  $("server-refresh").addEventListener("click", refreshServer);
  setInterval(() => {
    if (!document.hidden) refreshServer();
  }, 2000);
  renderFinished();
  renderCalls();
  if (token()) say("Signing in with the token of this tab…");
  refreshTools();
}

start();
