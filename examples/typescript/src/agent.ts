// toolwire's agent-loop example in TypeScript, and the TypeScript runner of
// the conformance scenario in examples/scenario.json.
//
// A scripted model (no LLM) answers in OpenAI Chat Completions format; its
// tool calls go to toolwire as one ExecuteBatch per turn through
// @toolwire/client (clients/typescript), and the results come back as OpenAI
// tool messages. The messages and tools are plain objects of the shapes the
// `openai` package's `client.chat.completions.create({messages, tools})`
// takes, so nothing here needs that package.

import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { isDeepStrictEqual } from "node:util";
import {
  BatchAccepted,
  BatchFinished,
  CallProgress,
  CallResult,
  ErrorKind,
  errorKindToJSON,
  ExecuteBatchResponse,
  ListToolsResponse,
  resultText,
  status,
  Tool,
  toCall,
  ToolCall,
  ToolwireClient,
  type ServiceError,
} from "@toolwire/client";

export const DEFAULT_SCENARIO = fileURLToPath(new URL("../../scenario.json", import.meta.url));

// --- The hand-off to an LLM API, in OpenAI's format -------------------------

/** A tool declaration in the "tools" array of a chat request. */
export interface OpenAITool {
  type: "function";
  function: { name: string; description: string; parameters: Record<string, unknown> };
}

/** A tool call in an assistant message. */
export interface OpenAIToolCall {
  id: string;
  type?: string;
  function: { name: string; arguments?: string | Record<string, unknown> };
}

/** A chat message; only the fields this loop uses. */
export type OpenAIMessage =
  | { role: "user" | "system"; content: string }
  | { role: "assistant"; content: string | null; tool_calls?: OpenAIToolCall[] }
  | { role: "tool"; tool_call_id: string; content: string };

/** Converts ListTools declarations into the "tools" of a chat request. */
export function openAITools(tools: Tool[]): OpenAITool[] {
  return tools.map((t) => ({
    type: "function",
    function: { name: t.name, description: t.description, parameters: JSON.parse(t.inputSchema || '{"type":"object","properties":{}}') },
  }));
}

/** Converts an assistant message's tool_calls into toolwire calls, keeping
 * the model's arguments text as it is. */
export function fromOpenAIToolCalls(toolCalls: OpenAIToolCall[]): ToolCall[] {
  return toolCalls.map((c) => {
    if ((c.type ?? "function") !== "function") {
      throw new Error(`tool call ${JSON.stringify(c.id)}: type ${JSON.stringify(c.type)} is not supported`);
    }
    return toCall({ callId: c.id, name: c.function.name, arguments: c.function.arguments ?? "" });
  });
}

/** Converts a result into the tool message the model reads next; the
 * package's resultText is what the model reads, errors included. */
export function openAIToolMessage(r: CallResult): { role: "tool"; tool_call_id: string; content: string } {
  return { role: "tool", tool_call_id: r.callId, content: resultText(r) };
}

// --- The scenario ---------------------------------------------------------------

export interface Scenario {
  user: string;
  steps: Step[];
}

export interface Step {
  name: string;
  list_tools?: { tools_include: { name: string; read_only: boolean; required?: string[] }[] };
  assistant?: { role: "assistant"; content: string | null; tool_calls?: OpenAIToolCall[] };
  cancel?: { call_id: string; after_progress: number };
  expect?: BatchExpect;
}

export interface BatchExpect {
  rpc_status?: string;
  rpc_message_contains?: string;
  events?: string;
  lanes?: { call_ids: string[]; parallel: boolean }[];
  finished?: Record<string, number>;
  calls?: Record<string, CallExpect>;
}

export interface CallExpect {
  events?: string;
  result?: {
    is_error?: boolean;
    error_kind?: string;
    tool_name?: string;
    text?: string;
    text_contains?: string[];
    structured?: unknown;
    structured_min?: Record<string, number>;
  };
  progress?: { total?: number; first_message?: string; last_message_contains?: string };
}

export function loadScenario(file = DEFAULT_SCENARIO): Scenario {
  return JSON.parse(readFileSync(file, "utf8"));
}

// --- The agent loop -------------------------------------------------------------

interface CallRecord {
  letters: string;
  progress: CallProgress[];
  result?: CallResult;
}

/** What one batch's stream showed. */
export class BatchRecord {
  readonly position = new Map<string, number>();
  readonly perCall = new Map<string, CallRecord>();
  letters = ""; // the events as A, S, P, R, F
  accepted?: BatchAccepted;
  finished?: BatchFinished;
  status = "OK";
  message = "";
  readonly problems: string[] = []; // broken rules that hold for every batch

  constructor(readonly calls: ToolCall[]) {
    calls.forEach((c, i) => {
      if (!this.position.has(c.callId)) this.position.set(c.callId, i);
      this.perCall.set(c.callId, { letters: "", progress: [] });
    });
  }

  add(ev: ExecuteBatchResponse): void {
    if (ev.accepted) {
      this.letters += "A";
      this.accepted = ev.accepted;
      return;
    }
    if (ev.finished) {
      this.letters += "F";
      this.finished = ev.finished;
      return;
    }
    const [kind, e] = ev.started
      ? (["started", ev.started] as const)
      : ev.progress
        ? (["progress", ev.progress] as const)
        : ev.result
          ? (["result", ev.result] as const)
          : (["unknown", undefined] as const);
    if (!e) {
      this.problems.push("an event of no known kind");
      return;
    }
    const letter = kind[0].toUpperCase();
    this.letters += letter;
    const i = this.position.get(e.callId);
    const rec = this.perCall.get(e.callId);
    if (i === undefined || !rec) {
      this.problems.push(`${kind} event for call "${e.callId}", which is not in the batch`);
      return;
    }
    if (e.index !== i) {
      this.problems.push(`${kind} event for call "${e.callId}" has index ${e.index}, want ${i}`);
    }
    rec.letters += letter;
    if (ev.started) {
      const lane = this.laneOf(e.callId);
      if (lane !== ev.started.lane) {
        this.problems.push(`call "${e.callId}" started in lane ${ev.started.lane}; the plan puts it in lane ${lane}`);
      }
    } else if (ev.progress) {
      const p = ev.progress;
      const prev = rec.progress[rec.progress.length - 1];
      if (prev?.progress !== undefined && p.progress !== undefined && p.progress < prev.progress) {
        this.problems.push(`call "${e.callId}": progress went back from ${prev.progress} to ${p.progress}`);
      }
      rec.progress.push(p);
    } else if (ev.result) {
      rec.result = ev.result;
      const want = this.calls[i].name;
      if (ev.result.toolName !== want) {
        this.problems.push(`result of call "${e.callId}" names tool "${ev.result.toolName}", want "${want}"`);
      }
    }
  }

  laneOf(callId: string): number {
    const lane = this.accepted?.lanes.find((l) => l.callIds.includes(callId));
    return lane ? lane.index : -1;
  }

  /** The results in batch order, as the next model request needs them. */
  results(): CallResult[] {
    return [...this.perCall.values()]
      .flatMap((r) => (r.result ? [r.result] : []))
      .sort((a, b) => a.index - b.index);
  }
}

/** Executes calls as one batch, recording every event; cancels the RPC after
 * the cancel.after_progress-th progress event of cancel.call_id. */
export async function runBatch(
  client: ToolwireClient,
  calls: ToolCall[],
  cancel?: { call_id: string; after_progress: number },
): Promise<BatchRecord> {
  const rec = new BatchRecord(calls);
  const abort = new AbortController();
  try {
    for await (const ev of client.executeBatch(calls, { signal: abort.signal, timeoutMs: 60_000 })) {
      rec.add(ev); // a UI would show progress here
      if (cancel && ev.progress?.callId === cancel.call_id && rec.perCall.get(cancel.call_id)?.progress.length === cancel.after_progress) {
        abort.abort(); // the stream then ends with CANCELLED
      }
    }
  } catch (err) {
    const e = err as ServiceError;
    rec.status = status[e.code] ?? String(err);
    rec.message = e.details ?? "";
  }
  return rec;
}

/** The body of the next chat request: the conversation and the tools. */
export interface ChatRequest {
  messages: OpenAIMessage[];
  tools: OpenAITool[];
}

/** Plays the scenario's conversation against the server behind client and
 * returns the next chat request and every mismatch with the scenario's
 * expectations; none means the server conforms. */
export async function run(client: ToolwireClient, scenario: Scenario): Promise<{ chat: ChatRequest; mismatches: string[] }> {
  const chat: ChatRequest = { messages: [{ role: "user", content: scenario.user }], tools: [] };
  const mismatches: string[] = [];
  for (const [i, step] of scenario.steps.entries()) {
    const fail = (msg: string) => mismatches.push(`${step.name}: ${msg}`);
    if (step.list_tools) {
      let listed: ListToolsResponse;
      try {
        listed = await client.listTools({ timeoutMs: 10_000 });
      } catch (err) {
        fail(`ListTools: ${err}`);
        continue;
      }
      chat.tools = openAITools(listed.tools);
      checkDeclarations(fail, step.list_tools, listed.tools, chat.tools);
    } else if (step.assistant) {
      const message = step.assistant;
      if (!message.tool_calls?.length) {
        chat.messages.push(message); // the model answered in text: the loop ends
        const rest = scenario.steps.length - i - 1;
        if (rest > 0) fail(`${rest} steps follow the model's final answer`);
        return { chat, mismatches };
      }
      let calls: ToolCall[];
      try {
        calls = fromOpenAIToolCalls(message.tool_calls);
      } catch (err) {
        fail(String(err));
        continue;
      }
      const rec = await runBatch(client, calls, step.cancel);
      if (rec.status === "OK") {
        // The model's message and an answer to each tool call, in the order of
        // the calls. A batch that did not finish (cancelled, refused) leaves
        // the conversation as it was.
        chat.messages.push(message, ...rec.results().map(openAIToolMessage));
      }
      rec.problems.forEach(fail);
      if (step.expect) checkBatch(fail, step.expect, rec);
    } else {
      fail("neither list_tools nor assistant");
    }
  }
  mismatches.push("the scenario ends without the model's final answer");
  return { chat, mismatches };
}

// --- The checks -------------------------------------------------------------------

type Fail = (msg: string) => void;
const q = (v: unknown) => JSON.stringify(v);

function checkDeclarations(fail: Fail, want: NonNullable<Step["list_tools"]>, tools: Tool[], decls: OpenAITool[]): void {
  for (const w of want.tools_include) {
    const i = tools.findIndex((t) => t.name === w.name);
    if (i < 0) {
      fail(`tool ${q(w.name)} is not declared`);
      continue;
    }
    const readOnly = tools[i].annotations?.readOnly ?? false;
    if (readOnly !== w.read_only) fail(`tool ${q(w.name)}: read_only ${readOnly}, want ${w.read_only}`);
    const d = decls[i];
    const params = d.function.parameters as { type?: string; required?: string[] };
    if (d.type !== "function" || d.function.name !== w.name || params.type !== "object") {
      fail(`tool ${q(w.name)}: OpenAI declaration ${q(d)} is not a function taking an object`);
    }
    for (const r of w.required ?? []) {
      if (!params.required?.includes(r)) fail(`tool ${q(w.name)}: parameter ${q(r)} is not required`);
    }
  }
}

const FINISHED_COUNTS = ["succeeded", "failed", "skipped", "cancelled", "replayed"] as const;

function checkBatch(fail: Fail, want: BatchExpect, rec: BatchRecord): void {
  const wantStatus = want.rpc_status ?? "OK";
  if (rec.status !== wantStatus) fail(`the RPC ended with ${rec.status} (${q(rec.message)}), want ${wantStatus}`);
  if (!rec.message.includes(want.rpc_message_contains ?? "")) {
    fail(`the RPC's message ${q(rec.message)} does not contain ${q(want.rpc_message_contains)}`);
  }
  matches(fail, "events", want.events, rec.letters);
  if (want.lanes) {
    const got = (rec.accepted?.lanes ?? []).map((l, i) => {
      if (l.index !== i) fail(`lane ${i} has index ${l.index}`);
      return { call_ids: l.callIds, parallel: l.parallel };
    });
    if (q(got) !== q(want.lanes)) fail(`lanes ${q(got)}, want ${q(want.lanes)}`);
  }
  if (want.finished) {
    if (!rec.finished) fail("no finished event");
    const got: Record<string, number> = {};
    for (const k of FINISHED_COUNTS) got[k] = rec.finished?.[k] ?? 0;
    for (const [k, w] of Object.entries(want.finished).sort()) {
      if (!(k in got)) fail(`finished has no count ${q(k)}`);
      else if (got[k] !== w) fail(`finished ${k} = ${got[k]}, want ${w} (got ${q(got)})`);
    }
  }
  for (const [id, expects] of Object.entries(want.calls ?? {}).sort()) {
    const got = rec.perCall.get(id);
    if (!got) {
      fail(`call ${q(id)} is not in the batch`);
      continue;
    }
    checkCall((msg) => fail(`call ${id}: ${msg}`), expects, got);
  }
}

function checkCall(fail: Fail, want: CallExpect, got: CallRecord): void {
  matches(fail, "events", want.events, got.letters);
  const p = want.progress;
  const progress = got.progress;
  if (p && progress.length > 0) {
    if (p.total !== undefined) {
      const bad = progress.find((ev) => ev.total !== p.total);
      if (bad) fail(`progress total ${bad.total}, want ${p.total}`);
    }
    if (p.first_message !== undefined && progress[0].message !== p.first_message) {
      fail(`first progress message ${q(progress[0].message)}, want ${q(p.first_message)}`);
    }
    const last = progress[progress.length - 1].message;
    if (!last.includes(p.last_message_contains ?? "")) {
      fail(`last progress message ${q(last)} does not contain ${q(p.last_message_contains)}`);
    }
  }
  const w = want.result;
  if (!w) return;
  const r = got.result;
  if (!r) {
    fail("no result");
    return;
  }
  if (w.is_error !== undefined && r.isError !== w.is_error) fail(`is_error ${r.isError}, want ${w.is_error}`);
  const kind = errorKindToJSON(r.errorKind as ErrorKind);
  if (w.error_kind !== undefined && kind !== w.error_kind) fail(`error_kind ${kind}, want ${w.error_kind}`);
  if (w.tool_name !== undefined && r.toolName !== w.tool_name) fail(`tool_name ${q(r.toolName)}, want ${q(w.tool_name)}`);
  // Texts are checked as the model will read them: in the tool message.
  const msg = openAIToolMessage(r);
  if (msg.role !== "tool" || msg.tool_call_id !== r.callId) fail(`tool message ${q(msg)}`);
  if (w.text !== undefined && msg.content !== w.text) fail(`text ${q(msg.content)}, want ${q(w.text)}`);
  for (const sub of w.text_contains ?? []) {
    if (!msg.content.includes(sub)) fail(`text ${q(msg.content)} does not contain ${q(sub)}`);
  }
  if (w.structured !== undefined || w.structured_min !== undefined) {
    let structured: unknown;
    try {
      structured = JSON.parse(r.structuredContent);
    } catch (err) {
      fail(`structured_content ${q(r.structuredContent)} is not JSON: ${err}`);
      return;
    }
    if (w.structured !== undefined && !isDeepStrictEqual(structured, w.structured)) {
      fail(`structured_content ${r.structuredContent}, want ${q(w.structured)}`);
    }
    for (const [k, least] of Object.entries(w.structured_min ?? {}).sort()) {
      const n = (structured as Record<string, unknown> | null)?.[k];
      if (typeof n !== "number" || n < least) {
        fail(`structured_content ${r.structuredContent}: ${q(k)} is not a number of at least ${least}`);
      }
    }
  }
}

function matches(fail: Fail, what: string, pattern: string | undefined, letters: string): void {
  if (pattern && !new RegExp(pattern).test(letters)) fail(`${what} ${q(letters)} do not match ${q(pattern)}`);
}

