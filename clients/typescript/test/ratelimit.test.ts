// Rate limits: a server started with --rate-per-caller 5 --rate-burst 1
// refuses a batch or call past the caller's allowance with
// RESOURCE_EXHAUSTED and a google.rpc.RetryInfo; the client waits it out
// (rateLimitRetries, default 3), or hands the refusal back with its delay.
// Every client here is the anonymous caller, so they share one allowance:
// drain() empties it right before what needs a refusal.

import { after, before, describe, test } from "node:test";
import * as assert from "node:assert/strict";
import {
  DEFAULT_RATE_LIMIT_RETRIES,
  StepBatcher,
  ToolwireClient,
  ToolwireError,
  resultText,
  retryDelay,
  status,
} from "@toolwire/client";
import { assertRunEnding, skipOwnServer, startServer, type OwnServer } from "./fixture.js";

const echo = (text: string) => [{ callId: text, name: "echo", arguments: { text } }];

/** Calls until the allowance is spent (a refusal comes back) and returns
 * the refusal. */
async function drain(hasty: ToolwireClient): Promise<ToolwireError> {
  for (let i = 0; i < 50; i++) {
    try {
      await hasty.callTool("echo", { text: "drain" });
    } catch (err) {
      assert.ok(err instanceof ToolwireError && err.code === status.RESOURCE_EXHAUSTED, `draining: ${String(err)}`);
      return err;
    }
  }
  throw new Error("50 calls in a row were let through: is the server rate limited?");
}

function assertRefusal(err: unknown): true {
  assertRunEnding(err, status.RESOURCE_EXHAUSTED);
  const e = err as ToolwireError;
  assert.match(e.details, /^rate limit: /);
  assert.ok(e.retryDelayMs !== undefined && e.retryDelayMs > 0, `retryDelayMs ${e.retryDelayMs}`);
  assert.equal(retryDelay(e), e.retryDelayMs);
  return true;
}

describe("rate limits (serve --rate-per-caller 5 --rate-burst 1)", { skip: skipOwnServer }, () => {
  let server: OwnServer;
  let hasty: ToolwireClient; // rateLimitRetries: 0
  before(async () => {
    server = await startServer({ args: ["--rate-per-caller", "5", "--rate-burst", "1"] });
    hasty = new ToolwireClient(server.addr, { rateLimitRetries: 0 });
  });
  after(async () => {
    hasty?.close();
    await server?.stop();
  });

  test("without retries the refusal is RESOURCE_EXHAUSTED with the delay, from callTool, executeBatch and the batcher", async () => {
    const err = await drain(hasty);
    assertRefusal(err);
    // The grpc-js error it wraps carries the same trailer.
    assert.equal(retryDelay(err.cause), err.retryDelayMs);
    assert.equal(retryDelay(new Error("other")), undefined);
    assert.equal(new ToolwireError(status.UNAVAILABLE, "down").retryDelayMs, undefined);

    await drain(hasty);
    await assert.rejects(hasty.collect(hasty.executeBatch(echo("batch"))), assertRefusal);
    await drain(hasty);
    await assert.rejects(new StepBatcher(hasty).execute(echo("step")[0]), assertRefusal);
  });

  test("by default, consecutive calls and batches wait out the refusals and succeed", async () => {
    assert.equal(DEFAULT_RATE_LIMIT_RETRIES, 3);
    const waits: number[] = [];
    const patient = new ToolwireClient(server.addr, { onRateLimit: (err, ms) => (assert.equal(err.code, status.RESOURCE_EXHAUSTED), waits.push(ms)) });
    try {
      await drain(hasty);
      for (const text of ["one", "two", "three"]) assert.equal(resultText(await patient.callTool("echo", { text })), text);
      await drain(hasty);
      const batch = await patient.collect(patient.executeBatch(echo("batch")));
      assert.equal(resultText(batch.results[0]), "batch");
      await drain(hasty);
      assert.equal(resultText(await new StepBatcher(patient).execute(echo("step")[0])), "step");
      assert.ok(waits.length >= 3, `waited ${waits.length} times: ${waits}`); // after each drain at least
      assert.ok(waits.every((ms) => ms > 0), `${waits}`);
    } finally {
      patient.close();
    }
  });

  test("aborting the signal ends the wait with the refusal", async () => {
    const run = new AbortController();
    let waits = 0;
    // Aborts as the wait begins: were the wait not ended, the retry would succeed.
    const client = new ToolwireClient(server.addr, { onRateLimit: () => (waits++, run.abort()) });
    try {
      await drain(hasty);
      await assert.rejects(client.callTool("echo", { text: "x" }, { signal: run.signal }), assertRefusal);
      assert.equal(waits, 1);

      const again = new AbortController();
      const c2 = new ToolwireClient(server.addr, { onRateLimit: () => again.abort() });
      try {
        await drain(hasty);
        await assert.rejects(c2.collect(c2.executeBatch(echo("y"), { signal: again.signal })), assertRefusal);
        await drain(hasty);
        // The batcher cancels its RPC once every call waiting on it is aborted.
        const step = new AbortController();
        const c3 = new ToolwireClient(server.addr, { onRateLimit: () => step.abort() });
        try {
          await assert.rejects(new StepBatcher(c3).execute(echo("z")[0], { signal: step.signal }), /abort/i);
        } finally {
          c3.close();
        }
      } finally {
        c2.close();
      }
    } finally {
      client.close();
    }
  });
});

describe("rate limits: a deadline shorter than the delay (serve --rate-per-caller 0.1 --rate-burst 1)", { skip: skipOwnServer }, () => {
  let server: OwnServer;
  before(async () => (server = await startServer({ args: ["--rate-per-caller", "0.1", "--rate-burst", "1"] })));
  after(async () => await server?.stop());

  test("the refusal comes back at once when the retry would start past the deadline", async () => {
    let waits = 0;
    const client = new ToolwireClient(server.addr, { onRateLimit: () => waits++ });
    try {
      await client.callTool("echo", { text: "first" }); // the allowance: one call, then one every 10 s
      // A retry in about 10 s cannot fit a 5 s deadline: no wait, the refusal.
      await assert.rejects(client.callTool("echo", { text: "x" }, { timeoutMs: 5_000 }), assertRefusal);
      await assert.rejects(client.collect(client.executeBatch(echo("y"), { timeoutMs: 5_000 })), assertRefusal);
      assert.equal(waits, 0);
    } finally {
      client.close();
    }
  });
});
