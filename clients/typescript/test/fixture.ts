// What the tests share: the server they run against (TOOLWIRE_ADDR, a
// `toolwire serve --diag --log-level debug` whose JSON log is at
// TOOLWIRE_SERVE_LOG), the model step they script, and the server's log
// lines, read to see from toolwire's side what happened to a call.
// These tests also run from a scratch project with the packed tarball
// installed, so they import the package by name, never by path.

import { readFileSync } from "node:fs";
import * as assert from "node:assert/strict";
import { Tool, type BatchAccepted } from "@toolwire/client";

export const addr = process.env.TOOLWIRE_ADDR ?? "";
const requireAll = !!process.env.TOOLWIRE_TEST_REQUIRE_ALL;
if (!addr && requireAll) throw new Error("TOOLWIRE_ADDR is not set, and TOOLWIRE_TEST_REQUIRE_ALL is: CI must start a server");
/** For describe(…, {skip}): why the server tests cannot run, or false. */
export const skip = !addr && "TOOLWIRE_ADDR is not set: start `toolwire serve --diag --log-level debug` and set it";

/** The model's first step: three safe calls and an unsafe one. */
export const STEP = [
  { id: "read_a", name: "echo", args: { text: "alpha" } },
  { id: "read_b", name: "sleep", args: { ms: 50 } },
  { id: "read_c", name: "echo", args: { text: "gamma" } },
  { id: "write_d", name: "fail", args: { message: "disk full" } },
];
/** The lane plan toolwire must make of STEP. */
export const STEP_LANES = [
  { index: 0, callIds: ["read_a", "read_b", "read_c"], parallel: true },
  { index: 1, callIds: ["write_d"], parallel: false },
];
/** What the model must read back from STEP, one text per call (sleep says
 * how long it slept: at least the 50 ms asked for). */
const STEP_RESULTS = [/^alpha$/, /^\{"slept_ms":(5\d|[6-9]\d|\d{3,})\}$/, /^gamma$/, /^disk full$/];

/** Checks that the model was shown every result of STEP, in order. */
export function assertStepResults(got: { id: string; text: string }[]): void {
  assert.deepEqual(got.map((r) => r.id), STEP.map((c) => c.id));
  got.forEach((r, i) => assert.match(r.text, STEP_RESULTS[i], `result of ${r.id}`));
}
export const FINAL = "Echoed alpha and gamma, napped, and the write failed: disk full.";

/** A tool the model was told about but the server does not have (a stale
 * listing): toolwire answers with an error result naming its tools. */
export const STALE_TOOL = Tool.fromPartial({ name: "search_web", description: "Searches the web.", inputSchema: '{"type":"object"}' });
export const UNKNOWN_TEXT = 'unknown tool "search_web". Registered tools: echo';

/** Checks that the batches seen were exactly one, with STEP's lanes. */
export function assertOneBatch(batches: BatchAccepted[]): void {
  assert.equal(batches.length, 1, `the step went out as ${batches.length} batches`);
  assert.deepEqual(batches[0].lanes, STEP_LANES);
}

interface LogLine {
  msg: string;
  batch_id?: string;
  call_id?: string;
  outcome?: string;
}

/** Waits until the server has logged that the call finished and returns its
 * outcome ("succeeded", "cancelled", …). */
export async function serverOutcome(batchId: string, callId: string): Promise<string> {
  const file = process.env.TOOLWIRE_SERVE_LOG;
  assert.ok(file, "TOOLWIRE_SERVE_LOG is not set: the abort tests read the server's log");
  for (let i = 0; i < 100; i++) {
    const found = readFileSync(file, "utf8")
      .split("\n")
      .flatMap((l) => (l.startsWith("{") ? [JSON.parse(l) as LogLine] : []))
      .find((l) => l.msg === "call finished" && l.batch_id === batchId && l.call_id === callId);
    if (found?.outcome) return found.outcome;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`the server logged no "call finished" for ${batchId}/${callId}: is it at --log-level debug?`);
}
