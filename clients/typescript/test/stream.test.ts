// Streams against stub ToolServices in this process (grpc-js servers that
// say what a test needs, also what a real server would not): collect checks
// that a stream is a whole batch, keepalive notices a connection gone
// silent (through a TCP proxy that stops forwarding), and reattach keeps
// to one deadline and stops waiting when its signal aborts.

import { test } from "node:test";
import * as assert from "node:assert/strict";
import { createServer, connect, type Socket } from "node:net";
import * as grpc from "@grpc/grpc-js";
import { AttachBatchRequest, BatchAccepted, BatchFinished, CallProgress, CallResult, ExecuteBatchRequest, ExecuteBatchResponse, ToolServiceService, ToolwireClient, ToolwireError, status } from "@toolwire/client";

type Stream = grpc.ServerWritableStream<ExecuteBatchRequest | AttachBatchRequest, ExecuteBatchResponse>;

/** A stub ToolService with the streaming methods given (the others
 * UNIMPLEMENTED). */
async function stubServer(impl: { executeBatch?: (call: Stream) => void; attachBatch?: (call: Stream) => void }): Promise<{ addr: string; stop(): void }> {
  const server = new grpc.Server();
  server.addService(ToolServiceService, impl as unknown as grpc.UntypedServiceImplementation);
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync("127.0.0.1:0", grpc.ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p))),
  );
  return { addr: `127.0.0.1:${port}`, stop: () => server.forceShutdown() };
}

/** A TCP proxy to target; freeze() makes its connections so far go silent
 * (nothing forwarded either way, nothing closed), as a frozen server or a
 * path that black-holes packets does; later connections are forwarded. */
async function freezeProxy(target: string): Promise<{ addr: string; freeze(): void; close(): void }> {
  const pairs = new Set<[Socket, Socket]>();
  const [host, port] = [target.slice(0, target.lastIndexOf(":")), Number(target.slice(target.lastIndexOf(":") + 1))];
  const server = createServer((down) => {
    const up = connect(port, host);
    const pair: [Socket, Socket] = [down, up];
    pairs.add(pair);
    for (const s of pair) {
      s.on("error", () => {});
      s.on("close", () => pairs.delete(pair));
    }
    down.pipe(up);
    up.pipe(down);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port: p } = server.address() as { port: number };
  const freeze = () => {
    for (const [down, up] of pairs) {
      down.unpipe(up);
      up.unpipe(down);
      down.pause();
      up.pause();
    }
  };
  const close = () => {
    for (const pair of pairs) for (const s of pair) s.destroy();
    server.close();
  };
  return { addr: `127.0.0.1:${p}`, freeze, close };
}

const ev = (seq: number, o: Pick<ExecuteBatchResponse, "accepted" | "progress" | "result" | "finished">) => ({ ...ExecuteBatchResponse.fromPartial({ seq }), ...o });
const accepted = (seq: number, ...ids: string[]) => ev(seq, { accepted: BatchAccepted.fromPartial({ batchId: "b1", lanes: [{ index: 0, callIds: ids, parallel: true }] }) });
const result = (seq: number, callId: string, index: number) => ev(seq, { result: CallResult.fromPartial({ callId, index, content: [{ text: { text: callId } }] }) });
const progress = (seq: number) => ev(seq, { progress: CallProgress.fromPartial({ callId: "a", message: `p${seq}` }) });
const finished = (seq: number) => ev(seq, { finished: BatchFinished.fromPartial({ succeeded: 1 }) });
const CALLS = [{ callId: "a", name: "echo" }];

test("a client's channel has keepalive unless its channelOptions say otherwise", () => {
  const seen = (channelOptions: grpc.ClientOptions = {}): grpc.ChannelOptions => {
    let got: grpc.ChannelOptions = {};
    const client = new ToolwireClient("127.0.0.1:1", {
      channelOptions: {
        ...channelOptions,
        channelFactoryOverride: (address, credentials, options) => ((got = options), new grpc.Channel(address, credentials, options)),
      },
    });
    client.close();
    return got;
  };
  const defaults = seen();
  assert.equal(defaults["grpc.keepalive_time_ms"], 30_000);
  assert.equal(defaults["grpc.keepalive_timeout_ms"], 10_000);
  assert.equal(defaults["grpc.keepalive_permit_without_calls"], 0);
  const own = seen({ "grpc.keepalive_time_ms": 60_000, "grpc.keepalive_permit_without_calls": 1 });
  assert.equal(own["grpc.keepalive_time_ms"], 60_000);
  assert.equal(own["grpc.keepalive_timeout_ms"], 10_000);
  assert.equal(own["grpc.keepalive_permit_without_calls"], 1);
});

test("a connection gone silent fails the stream when a keepalive ping goes unanswered, and reattach resumes it", { timeout: 20_000 }, async () => {
  // The batch's stream sends BatchAccepted and then nothing; AttachBatch
  // sends the rest. (grpc-js's server takes pings at any interval; a
  // toolwire server refuses them more often than its keepalive_min_time.)
  const attaches: number[] = [];
  const stub = await stubServer({
    executeBatch: (call) => void call.write(accepted(1, "a")),
    attachBatch: (call) => {
      attaches.push((call.request as AttachBatchRequest).afterSeq);
      call.write(result(2, "a", 0));
      call.write(finished(3));
      call.end();
    },
  });
  const proxy = await freezeProxy(stub.addr);
  const client = new ToolwireClient(proxy.addr, {
    reattach: { attempts: 3, backoffMs: 20 },
    channelOptions: { "grpc.keepalive_time_ms": 200, "grpc.keepalive_timeout_ms": 200 },
  });
  try {
    const start = Date.now();
    const seqs: number[] = [];
    for await (const e of client.executeBatch(CALLS, { options: { detach: true }, timeoutMs: 15_000 })) {
      seqs.push(e.seq);
      if (e.accepted) proxy.freeze();
    }
    assert.deepEqual(seqs, [1, 2, 3]);
    assert.deepEqual(attaches, [1]);
    assert.ok(Date.now() - start < 5_000, `the dead connection was noticed after ${Date.now() - start} ms`);
  } finally {
    client.close();
    proxy.close();
    stub.stop();
  }
});

test("collect returns a whole batch in batch order, and rejects a stream that is not one, with what arrived", async () => {
  const dropped = Object.assign(new Error("dropped"), { code: status.UNAVAILABLE, details: "dropped", metadata: new grpc.Metadata() });
  const cases: { name: string; events: (ExecuteBatchResponse | Error)[]; code?: status; error?: RegExp; got: (string | undefined)[] }[] = [
    { name: "a whole batch, finished out of order", events: [accepted(1, "a", "b", "c"), result(2, "c", 2), result(3, "a", 0), result(4, "b", 1), finished(5)], got: ["a", "b", "c"] },
    { name: "a call without a result, no BatchFinished", events: [accepted(1, "a", "b", "c"), result(2, "a", 0), result(3, "c", 2)], error: /without results for calls \["b"\]/, got: ["a", undefined, "c"] },
    { name: "a call without a result", events: [accepted(1, "a", "b"), result(2, "b", 1), finished(3)], error: /without results for calls \["a"\]/, got: [undefined, "b"] },
    { name: "a second result", events: [accepted(1, "a", "b"), result(2, "a", 0), result(3, "a", 0), result(4, "b", 1), finished(5)], error: /second result for call "a"/, got: ["a", undefined] },
    { name: "a call not in the plan", events: [accepted(1, "a", "b"), result(2, "a", 0), result(3, "zz", 1), finished(4)], error: /"zz", which is not in the plan/, got: ["a", undefined] },
    { name: "an index past the batch", events: [accepted(1, "a"), result(2, "a", 7), finished(3)], error: /index 7; the batch has 1 calls/, got: [undefined] },
    { name: "no BatchFinished", events: [accepted(1, "a"), result(2, "a", 0)], error: /without BatchFinished/, got: ["a"] },
    { name: "no BatchAccepted", events: [], error: /without BatchAccepted/, got: [] },
    { name: "a result before BatchAccepted", events: [result(1, "a", 0)], error: /before BatchAccepted/, got: [] },
    { name: "a stream that fails", events: [accepted(1, "a", "b"), result(2, "a", 0), dropped], code: status.UNAVAILABLE, error: /dropped/, got: ["a", undefined] },
  ];
  let events: (ExecuteBatchResponse | Error)[] = [];
  const stub = await stubServer({
    executeBatch: (call) => {
      for (const e of events) {
        if (e instanceof Error) return void call.emit("error", e);
        call.write(e);
      }
      call.end();
    },
  });
  const client = new ToolwireClient(stub.addr);
  try {
    for (const c of cases) {
      events = c.events;
      const got = client.collect(client.executeBatch(CALLS));
      if (!c.error) {
        const batch = await got;
        assert.deepEqual(batch.results.map((r) => r.callId), c.got, c.name);
        assert.ok(batch.accepted && batch.finished, c.name);
        continue;
      }
      await assert.rejects(got, (err) => {
        assert.ok(err instanceof ToolwireError, `${c.name}: ${String(err)}`);
        assert.equal(err.code, c.code ?? status.INTERNAL, `${c.name}: ${err.message}`);
        assert.match(err.message, c.error!, c.name);
        assert.deepEqual(err.batch?.results.map((r) => r?.callId), c.got, c.name);
        return true;
      });
    }
  } finally {
    client.close();
    stub.stop();
  }
});

/** A ServiceError as a stub server emits it to end a stream. */
const streamError = (code: status, details: string) => Object.assign(new Error(details), { code, details, metadata: new grpc.Metadata() });

/** A detached batch whose every stream drops: ExecuteBatch after
 * BatchAccepted, AttachBatch after one more event, sent after delayMs; the
 * 12th event is BatchFinished. */
async function droppingServer(delayMs: number): Promise<{ addr: string; stop(): void; attaches: number[] }> {
  const attaches: number[] = [];
  const start = Date.now();
  const stub = await stubServer({
    executeBatch: (call) => {
      call.write(accepted(1, "a"));
      setTimeout(() => call.emit("error", streamError(status.UNAVAILABLE, "dropped")), 20);
    },
    attachBatch: (call) => {
      attaches.push(Date.now() - start);
      const timer = setTimeout(() => {
        const seq = Number((call.request as AttachBatchRequest).afterSeq) + 1;
        if (seq >= 12) return void (call.write(finished(seq)), call.end());
        call.write(progress(seq));
        setTimeout(() => call.emit("error", streamError(status.UNAVAILABLE, "dropped")), 10);
      }, delayMs);
      call.on("cancelled", () => clearTimeout(timer));
    },
  });
  return { ...stub, attaches };
}

test("reattach keeps to one deadline: timeoutMs bounds the batch, re-attaches included", { timeout: 20_000 }, async () => {
  const stub = await droppingServer(300);
  const client = new ToolwireClient(stub.addr, { reattach: { attempts: 2, backoffMs: 10 } });
  try {
    const start = Date.now();
    let events = 0;
    await assert.rejects(
      (async () => {
        for await (const _ of client.executeBatch(CALLS, { options: { detach: true }, timeoutMs: 1000 })) events++;
      })(),
      (err) => err instanceof ToolwireError && (err.code === status.DEADLINE_EXCEEDED || err.code === status.UNAVAILABLE),
    );
    const took = Date.now() - start;
    assert.ok(took < 1500, `the batch of timeoutMs 1000 ended after ${took} ms, ${events} events, ${stub.attaches.length} AttachBatch`);
    assert.ok(events >= 2, `${events} events`);
    assert.ok(stub.attaches.every((t) => t < 1000), `AttachBatch opened at ${stub.attaches} ms`);
  } finally {
    client.close();
    stub.stop();
  }
});

test("aborting the signal while reattach waits to re-attach rejects with CANCELLED at once", { timeout: 20_000 }, async () => {
  const stub = await droppingServer(0);
  const client = new ToolwireClient(stub.addr, { reattach: { attempts: 3, backoffMs: 3000 } });
  const abort = new AbortController();
  try {
    let aborted = 0;
    await assert.rejects(
      (async () => {
        for await (const e of client.executeBatch(CALLS, { options: { detach: true }, signal: abort.signal })) {
          // The stream drops 20 ms after BatchAccepted; the wait is then on.
          if (e.accepted) setTimeout(() => ((aborted = Date.now()), abort.abort()), 200);
        }
      })(),
      (err) => err instanceof ToolwireError && err.code === status.CANCELLED,
    );
    const took = Date.now() - aborted;
    assert.ok(aborted > 0 && took < 500, `rejected ${took} ms after the abort`);
    assert.deepEqual(stub.attaches, [], "AttachBatch opened after the abort");
  } finally {
    client.close();
    stub.stop();
  }
});
