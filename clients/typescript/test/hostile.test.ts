// The client against servers that break the contract, each a real grpc-js
// server on a loopback port: listings that never end, a resumed stream
// whose events come again or out of order, a stream held open after its
// last event, a re-attach refused for ever, an event larger than the
// client receives. None needs a toolwire server.

import { test } from "node:test";
import * as assert from "node:assert/strict";
import * as grpc from "@grpc/grpc-js";
import { BinaryWriter } from "@bufbuild/protobuf/wire";
import {
  AttachBatchRequest,
  CallToolResponse,
  ExecuteBatchRequest,
  ExecuteBatchResponse,
  ListToolsRequest,
  ListToolsResponse,
  StepBatcher,
  ToolServiceService,
  ToolwireClient,
  ToolwireError,
  status,
} from "@toolwire/client";

type Stream = grpc.ServerWritableStream<ExecuteBatchRequest | AttachBatchRequest, ExecuteBatchResponse>;

interface Hostile {
  listTools?: (req: ListToolsRequest, n: number) => ListToolsResponse;
  executeBatch?: (call: Stream) => void;
  attachBatch?: (call: Stream, n: number) => void;
  callTool?: (cb: grpc.sendUnaryData<CallToolResponse>) => void;
}

/** Serves h on a loopback port; counts its RPCs. */
async function serve(h: Hostile): Promise<{ addr: string; calls: { list: number; attach: number }; stop(): void }> {
  const server = new grpc.Server();
  const calls = { list: 0, attach: 0 };
  const unimplemented = (_: unknown, cb: (err: grpc.ServiceError) => void) => cb({ code: status.UNIMPLEMENTED, details: "no" } as grpc.ServiceError);
  server.addService(ToolServiceService, {
    listTools: (call: grpc.ServerUnaryCall<ListToolsRequest, ListToolsResponse>, cb: grpc.sendUnaryData<ListToolsResponse>) => cb(null, h.listTools!(call.request, ++calls.list)),
    executeBatch: (call: Stream) => h.executeBatch!(call),
    attachBatch: (call: Stream) => h.attachBatch!(call, ++calls.attach),
    searchTools: unimplemented,
    callTool: (call: unknown, cb: grpc.sendUnaryData<CallToolResponse>) => (h.callTool ? h.callTool(cb) : unimplemented(call, cb)),
    getBatch: unimplemented,
    cancelBatch: unimplemented,
    resolveApproval: unimplemented,
    watchTools: (call: Stream) => call.end(),
  });
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync("127.0.0.1:0", grpc.ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p))),
  );
  return { addr: `127.0.0.1:${port}`, calls, stop: () => server.forceShutdown() };
}

/** Writes evs, then ends the stream with code (OK: ends it; undefined:
 * leaves it open). */
function send(call: Stream, evs: ExecuteBatchResponse[], code?: status): void {
  for (const ev of evs) call.write(ev);
  if (code === status.OK) call.end();
  else if (code !== undefined) call.emit("error", { code, details: "cut" });
}

// fromJSON: the events as JSON objects, without fromPartial's exact types.
const ev = (seq: number, e: object) => ExecuteBatchResponse.fromJSON({ seq, ...e });
const accepted = (seq: number, ...ids: string[]) => ev(seq, { accepted: { batchId: "b1", lanes: ids.map((id, index) => ({ index, callIds: [id] })) } });
const result = (seq: number, callId: string, index: number) => ev(seq, { result: { callId, index, content: [{ text: { text: callId.toUpperCase() } }] } });
const finished = (seq: number) => ev(seq, { finished: { batchId: "b1" } });

/** The seqs of a stream's events, and the error that ended it. */
async function drain(events: AsyncIterable<ExecuteBatchResponse>): Promise<{ seqs: number[]; err?: ToolwireError }> {
  const seqs: number[] = [];
  try {
    for await (const e of events) seqs.push(e.seq);
  } catch (err) {
    return { seqs, err: ToolwireError.from(err) };
  }
  return { seqs };
}

test("listTools stops at its bounds against pages that never end", async () => {
  const desc = "d".repeat(1000);
  const pageOf = (tools: number, token: (n: number) => string) => (_: ListToolsRequest, n: number) =>
    ListToolsResponse.fromPartial({
      revision: "r",
      nextPageToken: token(n),
      tools: Array.from({ length: tools }, (_, i) => ({ name: `t${String(n).padStart(9, "0")}-${String(i).padStart(4, "0")}`, description: desc })),
    });
  const cases = [
    { name: "pages of 1 MB", page: pageOf(1000, (n) => `p${n}`), opts: {}, maxCalls: 66, want: /more than 64 MiB/ },
    { name: "small pages", page: pageOf(1, (n) => `p${n}`), opts: { maxPages: 100 }, maxCalls: 100, want: /read 100 pages/ },
    { name: "a token twice", page: pageOf(1, () => "more"), opts: {}, maxCalls: 2, want: /token it named before/ },
  ];
  for (const c of cases) {
    const server = await serve({ listTools: c.page });
    const client = new ToolwireClient(server.addr);
    try {
      const signal = AbortSignal.timeout(20_000);
      await assert.rejects(client.listTools({ ...c.opts, signal }), (err) => err instanceof ToolwireError && c.want.test(err.message), c.name);
      assert.ok(server.calls.list <= c.maxCalls, `${c.name}: ${server.calls.list} pages read`);
    } finally {
      client.close();
      server.stop();
    }
  }
});

test("a resumed stream yields each seq once, in order, or fails", async () => {
  const first = [accepted(1, "a", "b", "c"), result(2, "a", 0)];
  const cases = [
    { name: "events again", resumed: [accepted(1, "a", "b", "c"), result(2, "a", 0), result(3, "b", 1), result(2, "a", 0), result(4, "c", 2), finished(5)], want: [1, 2, 3, 4, 5], err: undefined },
    { name: "out of order", resumed: [result(4, "c", 2), result(3, "b", 1), finished(5)], want: [1, 2], err: /seq 4/ },
    { name: "an event skipped", resumed: [result(3, "b", 1), finished(5)], want: [1, 2, 3], err: /seq 5/ },
    { name: "unnumbered", resumed: [result(0, "b", 1), result(3, "b", 1)], want: [1, 2], err: /seq 0/ },
  ];
  for (const c of cases) {
    const server = await serve({
      executeBatch: (call) => send(call, first, status.UNAVAILABLE),
      attachBatch: (call, n) => (n > 1 ? send(call, [], status.UNAVAILABLE) : send(call, c.resumed, status.UNAVAILABLE)),
    });
    const client = new ToolwireClient(server.addr, { reattach: { attempts: 3, backoffMs: 1 } });
    try {
      const calls = ["a", "b", "c"].map((callId) => ({ callId, name: "x" }));
      const { seqs, err } = await drain(client.executeBatch(calls, { options: { detach: true }, timeoutMs: 20_000 }));
      assert.deepEqual(seqs, c.want, c.name);
      if (c.err) assert.match(err?.message ?? "no error", c.err, c.name);
      else assert.equal(err, undefined, c.name);
    } finally {
      client.close();
      server.stop();
    }
  }
});

test("a detached batch on a server from before durable batches is a plain one", async () => {
  // In a rolling upgrade from such a version, an old replica numbers no
  // events and knows no detach: its events are yielded and a cut stream is
  // the error, with no re-attach, where the client threw "seq 0 after seq
  // 0" at the first event (closing the stream, so cancelling the batch).
  for (const cut of [false, true]) {
    const server = await serve({
      executeBatch: (call) => (cut ? send(call, [accepted(0, "a")], status.UNAVAILABLE) : send(call, [accepted(0, "a"), result(0, "a", 0), finished(0)])),
      attachBatch: (call) => send(call, [], status.UNIMPLEMENTED),
    });
    const client = new ToolwireClient(server.addr, { reattach: { attempts: 3, backoffMs: 1 } });
    try {
      const { seqs, err } = await drain(client.executeBatch([{ callId: "a", name: "x" }], { options: { detach: true }, timeoutMs: 20_000 }));
      assert.equal(seqs.length, cut ? 1 : 3, `cut=${cut}`);
      assert.equal(err?.code, cut ? status.UNAVAILABLE : undefined, `cut=${cut}: ${err?.message}`);
      assert.equal(server.calls.attach, 0, `cut=${cut}`);
    } finally {
      client.close();
      server.stop();
    }
  }
});

test("callTool on a server without CallTool sends the call as a batch of one", async () => {
  // In a rolling upgrade from a version before CallTool an old replica
  // answers it UNIMPLEMENTED; callTool rejected with that.
  let sent: ExecuteBatchRequest | undefined;
  const server = await serve({
    executeBatch: (call) => {
      sent = call.request as ExecuteBatchRequest;
      send(call, [accepted(1, "c1"), result(2, "c1", 0), finished(3)], status.OK);
    },
  });
  const client = new ToolwireClient(server.addr);
  try {
    const r = await client.callTool("x", {}, { callId: "c1", sessionId: "s1", timeoutMs: 20_000 });
    assert.equal(r.callId, "c1");
    assert.deepEqual([sent?.calls.map((c) => c.callId), sent?.sessionId], [["c1"], "s1"]);
  } finally {
    client.close();
    server.stop();
  }
});

test("a batch's stream ends at BatchFinished, held open or not", async () => {
  let open: Stream | undefined;
  const server = await serve({
    executeBatch: (call) => {
      open = call;
      send(call, [accepted(1, "a"), result(2, "a", 0), finished(3)]); // and never ends it
    },
  });
  const client = new ToolwireClient(server.addr);
  try {
    const signal = AbortSignal.timeout(10_000);
    const batch = await client.collect(client.executeBatch([{ callId: "a", name: "x" }], { signal }));
    assert.equal(batch.results[0].callId, "a");
    // And the StepBatcher lets go of its RPC too.
    const batcher = new StepBatcher(client);
    const r = await batcher.execute({ callId: "a", name: "x" }, { signal });
    assert.equal(r.callId, "a");
    await new Promise((resolve) => setTimeout(resolve, 1500));
    assert.ok(open?.cancelled, "the RPC held open after BatchFinished is still open");
  } finally {
    client.close();
    server.stop();
  }
});

test("re-attaching gives up after its attempts", async () => {
  const server = await serve({
    executeBatch: (call) => send(call, [accepted(1, "a")], status.UNAVAILABLE),
    attachBatch: (call) => send(call, [], status.UNAVAILABLE),
  });
  const client = new ToolwireClient(server.addr, { reattach: { attempts: 4, backoffMs: 1 } });
  try {
    const { seqs, err } = await drain(client.executeBatch([{ callId: "a", name: "x" }], { options: { detach: true }, timeoutMs: 20_000 }));
    assert.deepEqual(seqs, [1]);
    assert.equal(err?.code, status.UNAVAILABLE);
    assert.equal(server.calls.attach, 4);
  } finally {
    client.close();
    server.stop();
  }
});

test("an event of 100 MB is refused, not read", async () => {
  const server = await serve({
    executeBatch: (call) => send(call, [accepted(1, "a"), ev(2, { result: { callId: "a", index: 0, content: [{ text: { text: "x".repeat(100 << 20) } }] } })], status.OK),
  });
  const client = new ToolwireClient(server.addr);
  try {
    const { seqs, err } = await drain(client.executeBatch([{ callId: "a", name: "x" }], { timeoutMs: 20_000 }));
    assert.deepEqual(seqs, [1]);
    assert.equal(err?.code, status.RESOURCE_EXHAUSTED);
  } finally {
    client.close();
    server.stop();
  }
});

test("collect puts each result at its call's place in the plan, or rejects", async () => {
  const cases = [
    { name: "indexes swapped", evs: [accepted(1, "a", "b"), result(2, "b", 0), result(3, "a", 1), finished(4)], err: /index 0; its place in the plan is 1/ },
    { name: "a call not in the plan", evs: [accepted(1, "a", "b"), result(2, "c", 1), finished(3)], err: /not in the plan/ },
    { name: "a result twice", evs: [accepted(1, "a", "b"), result(2, "a", 0), result(3, "a", 0), finished(4)], err: /second result/ },
    { name: "a second plan", evs: [accepted(1, "a", "b"), result(2, "a", 0), accepted(3, "a", "b"), result(4, "a", 0), result(5, "b", 1), finished(6)], err: /second BatchAccepted/ },
    { name: "a call planned twice", evs: [accepted(1, "a", "a", "b"), result(2, "a", 0), result(3, "b", 1), finished(4)], err: /lists call "a" twice/ },
  ];
  for (const c of cases) {
    const server = await serve({ executeBatch: (call) => send(call, c.evs, status.OK) });
    const client = new ToolwireClient(server.addr);
    try {
      const events = client.executeBatch([{ callId: "a", name: "x" }, { callId: "b", name: "x" }], { timeoutMs: 20_000 });
      await assert.rejects(client.collect(events), (err) => err instanceof ToolwireError && err.code === status.INTERNAL && c.err.test(err.message), c.name);
    } finally {
      client.close();
      server.stop();
    }
  }
});

test("a refusal that says to retry in 30 days rejects at once", async () => {
  const days = 30 * 24 * 3600;
  // google.rpc.Status { code 8, details: [Any { RetryInfo { retry_delay: days } }] }
  const duration = new BinaryWriter().uint32(8).int64(days).finish();
  const retryInfo = new BinaryWriter().uint32(10).bytes(duration).finish();
  const any = new BinaryWriter().uint32(10).string("type.googleapis.com/google.rpc.RetryInfo").uint32(18).bytes(retryInfo).finish();
  const st = new BinaryWriter().uint32(8).int32(status.RESOURCE_EXHAUSTED).uint32(26).bytes(any).finish();
  const refusal = () => {
    const metadata = new grpc.Metadata();
    metadata.set("grpc-status-details-bin", Buffer.from(st));
    return { code: status.RESOURCE_EXHAUSTED, details: "come back next month", metadata };
  };
  let calls = 0;
  const server = await serve({
    callTool: (cb) => (calls++, cb(refusal())),
    executeBatch: (call) => (calls++, call.emit("error", refusal())),
  });
  const client = new ToolwireClient(server.addr);
  try {
    const signal = AbortSignal.timeout(10_000);
    const refused = (err: unknown) => err instanceof ToolwireError && err.code === status.RESOURCE_EXHAUSTED && err.retryDelayMs === days * 1000;
    await assert.rejects(client.callTool("x", {}, { signal }), refused);
    await assert.rejects(drain(client.executeBatch([{ callId: "a", name: "x" }], { signal })).then((r) => Promise.reject(r.err)), refused);
    assert.equal(calls, 2, "sent again at once, or waited for the delay");
  } finally {
    client.close();
    server.stop();
  }
});

test("callTool's result is its call's, or it rejects", async () => {
  const cases = [
    { name: "no result", res: CallToolResponse.fromJSON({}), err: /returned no result/ },
    { name: "another call's", res: CallToolResponse.fromJSON({ result: { callId: "other", content: [{ text: { text: "hi" } }] } }), err: /returned the result of call "other"/ },
  ];
  for (const c of cases) {
    const server = await serve({ callTool: (cb) => cb(null, c.res) });
    const client = new ToolwireClient(server.addr);
    try {
      await assert.rejects(client.callTool("x", {}, { callId: "a", timeoutMs: 20_000 }), (err) => err instanceof ToolwireError && err.code === status.INTERNAL && c.err.test(err.message), c.name);
    } finally {
      client.close();
      server.stop();
    }
  }
});

test("a stream ended as if done before BatchFinished is re-attached", async () => {
  const afters: number[] = [];
  const server = await serve({
    executeBatch: (call) => send(call, [accepted(1, "a"), result(2, "a", 0)], status.OK),
    attachBatch: (call) => {
      const after = (call.request as AttachBatchRequest).afterSeq;
      afters.push(after);
      send(call, after === 2 && afters.length === 1 ? [finished(3)] : [], status.OK);
    },
  });
  const client = new ToolwireClient(server.addr, { reattach: { attempts: 3, backoffMs: 1 } });
  try {
    const batch = await client.collect(client.executeBatch([{ callId: "a", name: "x" }], { options: { detach: true }, timeoutMs: 20_000 }));
    assert.equal(batch.finished?.batchId, "b1");
    assert.deepEqual(afters, [2]);
    // attachBatch from the last seq of a finished batch: nothing follows.
    const { seqs, err } = await drain(client.attachBatch("b1", 3, { timeoutMs: 20_000 }));
    assert.deepEqual(seqs, []);
    assert.equal(err, undefined);
    assert.deepEqual(afters, [2, 3]);
  } finally {
    client.close();
    server.stop();
  }
});

test("calls without results are named briefly", async () => {
  const ids = Array.from({ length: 10_000 }, (_, i) => `call-${String(i).padStart(6, "0")}`);
  const server = await serve({ executeBatch: (call) => send(call, [accepted(1, ...ids)], status.OK) });
  const client = new ToolwireClient(server.addr);
  try {
    await assert.rejects(client.collect(client.executeBatch([{ callId: "a", name: "x" }], { timeoutMs: 20_000 })), (err) => {
      assert.ok(err instanceof ToolwireError && err.message.length < 1000 && /and 9980 more/.test(err.message), String(err).slice(0, 200));
      return true;
    });
  } finally {
    client.close();
    server.stop();
  }
});
