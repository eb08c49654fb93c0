// Detached batches: attachBatch, and the automatic re-attach through a real
// TCP proxy that cuts the stream.

import { test } from "node:test";
import * as assert from "node:assert/strict";
import { createServer, connect, type Socket } from "node:net";
import { ExecuteBatchResponse, ToolwireClient, ToolwireError, status } from "@toolwire/client";
import { skipOwnServer, startServer } from "./fixture.js";

/** A TCP proxy to target whose connections cut() closes. */
async function cutProxy(target: string): Promise<{ addr: string; cut(): void; close(): void }> {
  const sockets = new Set<Socket>();
  const [host, port] = [target.slice(0, target.lastIndexOf(":")), Number(target.slice(target.lastIndexOf(":") + 1))];
  const server = createServer((down) => {
    const up = connect(port, host);
    for (const s of [down, up]) {
      sockets.add(s);
      s.on("error", () => {});
      s.on("close", () => sockets.delete(s));
    }
    down.pipe(up);
    up.pipe(down);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port: p } = server.address() as { port: number };
  const cut = () => {
    for (const s of sockets) s.destroy();
  };
  return { addr: `127.0.0.1:${p}`, cut, close: () => (cut(), server.close()) };
}

test("a detached batch survives three cuts, every event once, in order", { skip: skipOwnServer }, async () => {
  const server = await startServer();
  const proxy = await cutProxy(server.addr);
  const client = new ToolwireClient(proxy.addr, { reattach: { attempts: 10, backoffMs: 20 } });
  try {
    const sleep = (callId: string) => ({ callId, name: "sleep", arguments: { ms: 700 } });
    const events: ExecuteBatchResponse[] = [];
    let cuts = 0;
    for await (const ev of client.executeBatch([sleep("a"), sleep("b"), sleep("c")], { options: { detach: true, sequential: true } })) {
      events.push(ev);
      if (cuts < 3 && [3, 15, 30].includes(events.length)) {
        proxy.cut();
        cuts++;
      }
    }
    assert.equal(cuts, 3, `${events.length} events`);
    assert.deepEqual(
      events.map((ev) => ev.seq),
      events.map((_, i) => i + 1),
    );
    assert.equal(events.at(-1)?.finished?.succeeded, 3);

    const id = events[0].accepted!.batchId;
    const again: ExecuteBatchResponse[] = [];
    for await (const ev of client.attachBatch(id, 1)) again.push(ev);
    assert.equal(again.length, events.length - 1);
    assert.equal(again[0].seq, 2);
    await assert.rejects(
      (async () => {
        for await (const _ of client.attachBatch("nope")) void _;
      })(),
      (err) => err instanceof ToolwireError && err.code === status.NOT_FOUND,
    );
  } finally {
    client.close();
    proxy.close();
    await server.stop();
  }
});
