// What the tests share: the server they run against (TOOLWIRE_ADDR, a
// `toolwire serve --diag --log-level debug` whose JSON log is at
// TOOLWIRE_SERVE_LOG), the model step they script, and the server's log
// lines, read to see from toolwire's side what happened to a call.
// These tests also run from a scratch project with the packed tarball
// installed, so they import the package by name, never by path.

import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import * as assert from "node:assert/strict";
import { ERROR_PREFIX, status, Tool, ToolwireClient, ToolwireError, type BatchAccepted } from "@toolwire/client";

export const addr = process.env.TOOLWIRE_ADDR ?? "";
const requireAll = !!process.env.TOOLWIRE_TEST_REQUIRE_ALL;
if (!addr && requireAll) throw new Error("TOOLWIRE_ADDR is not set, and TOOLWIRE_TEST_REQUIRE_ALL is: CI must start a server");
/** For describe(…, {skip}): why the server tests cannot run, or false. */
export const skip = !addr && "TOOLWIRE_ADDR is not set: start `toolwire serve --diag --log-level debug` and set it";

/** The toolwire binary the tests that need a server of their own (with a
 * token, or one they stop) start: TOOLWIRE_BIN. */
const bin = process.env.TOOLWIRE_BIN ?? "";
if (!bin && requireAll) throw new Error("TOOLWIRE_BIN is not set, and TOOLWIRE_TEST_REQUIRE_ALL is: CI must say where the built toolwire is");
/** For describe(…, {skip}): why the tests with a server of their own cannot run, or false. */
export const skipOwnServer = !bin && "TOOLWIRE_BIN is not set: build toolwire (go build ./cmd/toolwire) and set it to the binary";

/** The token the servers started by startServer accept (at least 16
 * characters, as toolwire wants), and one they refuse. */
export const TOKEN = "right-token-0123456789abcdef";
export const WRONG_TOKEN = "wrong-token-0123456789abcdef";

export interface OwnServer {
  addr: string;
  /** Stops the server and waits until it has exited. */
  stop(): Promise<void>;
  /** Sends the server SIGHUP: it reads its --config file again. */
  hangUp(): void;
}

/** Starts `toolwire serve --diag` on a free port, accepting TOKEN when
 * withToken, in an empty temporary workspace; args are more flags for
 * serve (a rate limit: ["--rate-per-caller", "5", "--rate-burst", "1"]). */
export async function startServer(opts: { withToken?: boolean; args?: string[] } = {}): Promise<OwnServer> {
  const dir = mkdtempSync(join(tmpdir(), "toolwire-test-"));
  const env = { ...process.env };
  if (opts.withToken) env.TOOLWIRE_TOKENS = `{agent: ${TOKEN}}`;
  const proc = spawn(bin, ["serve", "--diag", "--listen", "127.0.0.1:0", "--log-format", "json", ...(opts.args ?? [])], { cwd: dir, env, stdio: ["ignore", "ignore", "pipe"] });
  const exited = new Promise<void>((resolve) => proc.once("exit", () => resolve()));
  const stop = async () => {
    if (proc.exitCode === null && proc.signalCode === null) proc.kill("SIGTERM");
    await exited;
    rmSync(dir, { recursive: true, force: true });
  };
  let log = "";
  const addr = await new Promise<string>((resolve, reject) => {
    proc.stderr!.setEncoding("utf8");
    proc.stderr!.on("data", (chunk: string) => {
      log += chunk;
      const m = /"msg":"toolwire listening on ([^"]+)"/.exec(log);
      if (m) resolve(m[1]);
    });
    proc.once("error", reject);
    proc.once("exit", (code) => reject(new Error(`toolwire serve exited (${code}) before listening:\n${log}`)));
  }).catch(async (err) => {
    await stop();
    throw err;
  });
  return { addr, stop, hangUp: () => proc.kill("SIGHUP") };
}

/** Checks that err is the ToolwireError that ends a run: its status code and
 * a one-line message that names it; a rate limit's refusal carries its
 * delay. */
export function assertRunEnding(err: unknown, code: status): true {
  assert.ok(err instanceof ToolwireError, `not a ToolwireError: ${String(err)}`);
  assert.equal(err.code, code, err.message);
  assert.ok(err.message.startsWith(`toolwire: ${status[code]}: `), err.message);
  assert.ok(!err.message.includes("\n"), err.message);
  if (code === status.RESOURCE_EXHAUSTED) assert.ok(err.retryDelayMs !== undefined && err.retryDelayMs > 0, `retryDelayMs ${err.retryDelayMs}`);
  return true;
}

/** What each adapter's tests do with a server whose RPCs fail: a client with
 * a wrong token, and a client of a server that has stopped. */
export const FAILING_SERVERS: { name: string; code: status; client(): Promise<{ client: ToolwireClient; done(): Promise<void> }> }[] = [
  {
    name: "a wrong token",
    code: status.UNAUTHENTICATED,
    async client() {
      const server = await startServer({ withToken: true });
      const client = new ToolwireClient(server.addr, { token: WRONG_TOKEN, insecureToken: true });
      return { client, done: async () => (client.close(), await server.stop()) };
    },
  },
  {
    name: "a stopped server",
    code: status.UNAVAILABLE,
    async client() {
      // The client has talked to the server, which then went away.
      const server = await startServer();
      const client = new ToolwireClient(server.addr);
      await client.listTools();
      await server.stop();
      return { client, done: async () => client.close() };
    },
  },
  {
    name: "a rate limit's refusal and no retries left",
    code: status.RESOURCE_EXHAUSTED,
    async client() {
      // 4 calls at once (STEP's), then one every 10 s: the first batch
      // spends the allowance, and the client does not wait.
      const server = await startServer({ args: ["--rate-per-caller", "0.1", "--rate-burst", "4"] });
      const client = new ToolwireClient(server.addr, { rateLimitRetries: 0 });
      await client.collect(client.executeBatch(STEP.map((c) => ({ callId: c.id, name: "echo", arguments: { text: c.id } }))));
      return { client, done: async () => (client.close(), await server.stop()) };
    },
  },
];

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
 * how long it slept: at least the 50 ms asked for), and which are flagged
 * as failed. */
const STEP_RESULTS = [/^alpha$/, /^\{"slept_ms":(5\d|[6-9]\d|\d{3,})\}$/, /^gamma$/, /^disk full$/];
const STEP_ERRORS = [false, false, false, true];

/** A tool result as the model was shown it: its text and whether it came
 * flagged as a failed call (the framework's error slot, or ERROR_PREFIX
 * where it has none; the text is without the prefix). */
export interface Seen {
  id: string;
  text: string;
  error: boolean;
}

/** A text with ERROR_PREFIX as a Seen, for frameworks without an error slot. */
export function seenPrefixed(id: string, text: string): Seen {
  return text.startsWith(ERROR_PREFIX) ? { id, text: text.slice(ERROR_PREFIX.length), error: true } : { id, text, error: false };
}

/** Checks that the model was shown every result of STEP, in order, the
 * failed call flagged as failed and the others not. */
export function assertStepResults(got: Seen[]): void {
  assert.deepEqual(got.map((r) => r.id), STEP.map((c) => c.id));
  got.forEach((r, i) => assert.match(r.text, STEP_RESULTS[i], `result of ${r.id}`));
  assert.deepEqual(got.map((r) => r.error), STEP_ERRORS, "the results flagged as failed");
}

/** A step where the model cannot tell the calls apart by their text: a tool
 * that failed saying "boom" and one that returned "boom". */
export const BOOM_STEP = [
  { id: "failed", name: "fail", args: { message: "boom" } },
  { id: "echoed", name: "echo", args: { text: "boom" } },
];
/** What the model must be shown of BOOM_STEP. */
export const BOOM_SEEN: Seen[] = [
  { id: "failed", text: "boom", error: true },
  { id: "echoed", text: "boom", error: false },
];
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
 * outcome ("succeeded", "cancelled", …). An empty batchId matches any batch,
 * for a call made with callTool (whose batch ID the client never sees) under
 * an ID no other call has. */
export async function serverOutcome(batchId: string, callId: string): Promise<string> {
  const file = process.env.TOOLWIRE_SERVE_LOG;
  assert.ok(file, "TOOLWIRE_SERVE_LOG is not set: the abort tests read the server's log");
  for (let i = 0; i < 100; i++) {
    const found = readFileSync(file, "utf8")
      .split("\n")
      .flatMap((l) => (l.startsWith("{") ? [JSON.parse(l) as LogLine] : []))
      .find((l) => l.msg === "call finished" && (batchId === "" || l.batch_id === batchId) && l.call_id === callId);
    if (found?.outcome) return found.outcome;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`the server logged no "call finished" for ${batchId}/${callId}: is it at --log-level debug?`);
}
