// The client and the step batcher against a real toolwire server.

import { after, before, describe, test } from "node:test";
import * as assert from "node:assert/strict";
import { getEventListeners } from "node:events";
import * as grpc from "@grpc/grpc-js";
import { BatchAccepted, CallResult, ErrorKind, StepBatcher, ToolwireClient, ToolwireError, resultText, status, toolMessageText } from "@toolwire/client";
import { addr, assertRunEnding, serverOutcome, skip, skipOwnServer, startServer, STEP_LANES, TOKEN, WRONG_TOKEN } from "./fixture.js";

describe("ToolwireClient", { skip }, () => {
  let client: ToolwireClient;
  before(() => (client = new ToolwireClient(addr)));
  after(() => client?.close());

  test("listTools returns the diag tools and a revision", async () => {
    const res = await client.listTools();
    assert.ok(res.revision);
    const names = res.tools.map((t) => t.name);
    for (const n of ["echo", "fail", "sleep"]) assert.ok(names.includes(n), `${n} not in ${names}`);
  });

  test("collect returns results in batch order whatever order they finish in", async () => {
    const batch = await client.collect(
      client.executeBatch([
        { callId: "slow", name: "sleep", arguments: { ms: 100 } },
        { callId: "fast", name: "echo", arguments: '{"text":"quick"}' },
      ]),
    );
    assert.deepEqual(batch.results.map((r) => r.callId), ["slow", "fast"]);
    assert.equal(resultText(batch.results[1]), "quick");
    assert.equal(batch.finished?.succeeded, 2);
  });

  test("callTool runs one call; a failing tool is a result, not an exception", async () => {
    const r = await client.callTool("fail", { message: "nope" });
    assert.equal(r.isError, true);
    assert.equal(r.errorKind, ErrorKind.ERROR_KIND_TOOL_ERROR);
    assert.equal(resultText(r), "nope");
    assert.equal(toolMessageText(r), "Error: nope");
    assert.equal(toolMessageText(await client.callTool("echo", { text: "nope" })), "nope");
  });

  test("callTool is one unary CallTool, not a batch", async () => {
    const methods: string[] = [];
    const seen: grpc.Interceptor = (options, next) => {
      methods.push(options.method_definition.path);
      return new grpc.InterceptingCall(next(options));
    };
    const c = new ToolwireClient(addr, { channelOptions: { interceptors: [seen] } });
    try {
      const r = await c.callTool("echo", { text: "unary" }, { callId: "u1", sessionId: "ts-session" });
      assert.equal(resultText(r), "unary");
      assert.equal(r.callId, "u1");
      assert.equal(r.isError, false);
    } finally {
      c.close();
    }
    assert.deepEqual(methods, ["/toolwire.v1.ToolService/CallTool"]);
  });

  test("callTool passes the call's idempotency key and timeout", async () => {
    const key = `ts-key-${process.pid}-${Date.now()}`;
    const first = await client.callTool("echo", { text: "once" }, { callId: "k1", idempotencyKey: key });
    const again = await client.callTool("echo", { text: "once" }, { callId: "k2", idempotencyKey: key });
    assert.equal(first.replayed, false);
    assert.equal(again.replayed, true);
    assert.equal(again.callId, "k2");
    assert.equal(resultText(again), "once");
    const slow = await client.callTool("sleep", { ms: 60_000 }, { callTimeoutMs: 50 });
    assert.equal(slow.errorKind, ErrorKind.ERROR_KIND_TIMEOUT);
    assert.match(resultText(slow), /timed out after 50ms/);
  });

  test("callTool of a malformed call is an RPC error", async () => {
    await assert.rejects(client.callTool("echo", { text: "hi" }, { callId: "" }), (err) => assertRunEnding(err, status.INVALID_ARGUMENT));
  });

  test("aborting callTool cancels the call on the server", async () => {
    const abort = new AbortController();
    const callId = `ts-abort-${process.pid}-${Date.now()}`;
    const pending = client.callTool("sleep", { ms: 60_000 }, { callId, signal: abort.signal });
    setTimeout(() => abort.abort(), 200);
    await assert.rejects(pending, (err) => assertRunEnding(err, status.CANCELLED));
    assert.equal(await serverOutcome("", callId), "cancelled");
  });

  test("a malformed batch is an RPC error", async () => {
    await assert.rejects(client.collect(client.executeBatch([])), (err) => assertRunEnding(err, status.INVALID_ARGUMENT));
  });

  test("watchTools yields the current revision", async () => {
    const { revision } = await client.listTools();
    const abort = new AbortController();
    for await (const ev of client.watchTools({ signal: abort.signal })) {
      assert.equal(ev.revision, revision);
      break; // ends the stream
    }
  });

  test("a token without TLS is refused unless insecureToken says so", () => {
    assert.throws(() => new ToolwireClient(addr, { token: "t" }), /a token needs TLS/);
    new ToolwireClient(addr, { token: "t", insecureToken: true }).close();
  });
});

test("an RPC failure rejects every call of the batch", async () => {
  const client = new ToolwireClient("127.0.0.1:1"); // nothing listens on port 1
  try {
    const batcher = new StepBatcher(client);
    const got = await Promise.allSettled(["a", "b"].map((callId) => batcher.execute({ callId, name: "echo" })));
    assert.deepEqual(
      got.map((r) => r.status === "rejected" && (r.reason as { code?: number }).code),
      [status.UNAVAILABLE, status.UNAVAILABLE],
    );
    for (const r of got) assert.ok(r.status === "rejected" && assertRunEnding(r.reason, status.UNAVAILABLE));
    await assert.rejects(client.listTools(), (err) => assertRunEnding(err, status.UNAVAILABLE));
  } finally {
    client.close();
  }
});

test("a wrong token is a ToolwireError saying UNAUTHENTICATED, the right one works", { skip: skipOwnServer }, async () => {
  const server = await startServer({ withToken: true });
  const wrong = new ToolwireClient(server.addr, { token: WRONG_TOKEN, insecureToken: true });
  const right = new ToolwireClient(server.addr, { token: TOKEN, insecureToken: true });
  try {
    await assert.rejects(wrong.listTools(), (err) => assertRunEnding(err, status.UNAUTHENTICATED) && err instanceof ToolwireError && err.details === "invalid bearer token");
    await assert.rejects(wrong.callTool("echo", { text: "hi" }), (err) => assertRunEnding(err, status.UNAUTHENTICATED));
    assert.equal(resultText(await right.callTool("echo", { text: "hi" })), "hi");
  } finally {
    wrong.close();
    right.close();
    await server.stop();
  }
});

describe("StepBatcher", { skip }, () => {
  let client: ToolwireClient;
  before(() => (client = new ToolwireClient(addr)));
  after(() => client?.close());

  // Three safe calls with a known delay and one unsafe call, fired at once as
  // frameworks do; on and off, to report the batches, lanes and wall time.
  const step = [
    { callId: "read_a", name: "sleep", arguments: { ms: 200 } },
    { callId: "read_b", name: "sleep", arguments: { ms: 200 } },
    { callId: "read_c", name: "sleep", arguments: { ms: 200 } },
    { callId: "write_d", name: "fail", arguments: { message: "disk full" } },
  ];
  for (const enabled of [true, false]) {
    test(`a 4-call step with the batcher ${enabled ? "on" : "off"}`, async (t) => {
      const batches: BatchAccepted[] = [];
      const batcher = new StepBatcher(client, { enabled, onBatch: (a) => batches.push(a) });
      const start = performance.now();
      const results = await Promise.all(step.map((c) => batcher.execute(c)));
      const ms = performance.now() - start;
      assert.deepEqual(results.map((r) => r.callId), step.map((c) => c.callId));
      assert.equal(resultText(results[3]), "disk full");
      const lanes = batches.map((b) => b.lanes.map((l) => `${l.parallel ? "parallel" : "serial"}[${l.callIds.join(",")}]`).join(" "));
      t.diagnostic(`batcher ${enabled ? "on" : "off"}: ${batches.length} batches: ${lanes.join(" | ")}; step wall time ${ms.toFixed(0)} ms`);
      if (enabled) {
        assert.equal(batches.length, 1);
        assert.deepEqual(batches[0].lanes, STEP_LANES);
      } else {
        assert.equal(batches.length, 4);
      }
    });
  }

  test("progress reaches the call's onProgress", async () => {
    const seen: string[] = [];
    const r = await new StepBatcher(client).execute({ callId: "p", name: "sleep", arguments: { ms: 30 } }, { onProgress: (p) => seen.push(p.message) });
    assert.equal(r.isError, false);
    assert.ok(seen.includes("sleeping 30 ms"), JSON.stringify(seen));
  });

  test("a repeated call ID starts the next batch", async () => {
    const batches: BatchAccepted[] = [];
    const batcher = new StepBatcher(client, { onBatch: (a) => batches.push(a) });
    const rs: CallResult[] = await Promise.all([
      batcher.execute({ callId: "x", name: "echo", arguments: { text: "1" } }),
      batcher.execute({ callId: "x", name: "echo", arguments: { text: "2" } }),
    ]);
    assert.deepEqual(rs.map(resultText), ["1", "2"]);
    assert.equal(batches.length, 2);
  });

  test("a run-long signal keeps no listener per call", async () => {
    const run = new AbortController();
    const batcher = new StepBatcher(client);
    for (let step = 0; step < 3; step++) {
      await Promise.all(["a", "b"].map((callId) => batcher.execute({ callId, name: "echo", arguments: { text: callId } }, { signal: run.signal })));
      for await (const _ of client.executeBatch([{ callId: "c", name: "echo", arguments: { text: "c" } }], { signal: run.signal }));
    }
    assert.equal(getEventListeners(run.signal, "abort").length, 0);
  });

  test("a step larger than maxCalls is split", async () => {
    const batches: BatchAccepted[] = [];
    const batcher = new StepBatcher(client, { maxCalls: 2, onBatch: (a) => batches.push(a) });
    const rs = await Promise.all(["a", "b", "c"].map((text) => batcher.execute({ callId: text, name: "echo", arguments: { text } })));
    assert.deepEqual(rs.map(resultText), ["a", "b", "c"]);
    assert.deepEqual(
      batches.map((b) => b.lanes.flatMap((l) => l.callIds)).sort(), // the two RPCs race
      [["a", "b"], ["c"]],
    );
  });

  test("calls without an ID get one, and windowMs 0 batches one tick", async () => {
    const batches: BatchAccepted[] = [];
    const batcher = new StepBatcher(client, { windowMs: 0, onBatch: (a) => batches.push(a) });
    const rs = await Promise.all(["a", "b"].map((text) => batcher.execute({ callId: "", name: "echo", arguments: { text } })));
    assert.deepEqual(rs.map(resultText), ["a", "b"]);
    assert.equal(batches.length, 1);
    assert.ok(rs.every((r) => r.callId.length > 0));
  });

  test("aborting one call of two leaves the other running; aborting both cancels the batch", async () => {
    const batches: BatchAccepted[] = [];
    const batcher = new StepBatcher(client, { onBatch: (a) => batches.push(a) });
    const one = new AbortController();
    const both = new AbortController();
    const a = batcher.execute({ callId: "a", name: "sleep", arguments: { ms: 100 } }, { signal: one.signal });
    const b = batcher.execute({ callId: "b", name: "echo", arguments: { text: "b" } });
    one.abort();
    await assert.rejects(a, /abort/i);
    assert.equal(resultText(await b), "b");
    assert.deepEqual(batches[0].lanes.flatMap((l) => l.callIds), ["b"], "a call aborted in the window was sent");

    const c = batcher.execute({ callId: "c", name: "sleep", arguments: { ms: 30_000 } }, { signal: both.signal });
    const d = batcher.execute({ callId: "d", name: "sleep", arguments: { ms: 30_000 } }, { signal: both.signal, onProgress: () => both.abort() });
    await assert.rejects(c, /abort/i);
    await assert.rejects(d, /abort/i);
    assert.equal(await serverOutcome(batches[1].batchId, "d"), "cancelled");
  });
});
