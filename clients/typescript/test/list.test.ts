// Listing and searching a catalog larger than a gRPC message: listTools
// asks for it a page at a time and puts the pages together, and starts
// over when the tools change between its pages; searchTools finds the few
// tools a step needs.

import { after, before, describe, test } from "node:test";
import * as assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import * as grpc from "@grpc/grpc-js";
import { ListToolsRequest, ListToolsResponse, Tool, ToolServiceService, ToolwireClient, ToolwireError, status } from "@toolwire/client";
import { addr, skip, skipOwnServer, startServer, type OwnServer } from "./fixture.js";

/** A config file of n HTTP tools with descriptions of about 4.5 KB (as
 * large as GitHub's declarations, with their schemas) and, when extra is
 * set, one more tool of that name. */
function catalogConfig(file: string, n: number, extra?: string): void {
  const words = "the a repository pull request issue list create update delete organization user team token scope access returned page per sort".split(" ");
  let seed = 31;
  const word = () => words[(seed = (seed * 1103515245 + 12345) % 2147483648) % words.length];
  const tools = [];
  for (let i = 0; i < n; i++) {
    const desc = Array.from({ length: 700 }, word).join(" ");
    tools.push({ name: `tool_${String(i).padStart(5, "0")}`, title: `Tool ${i}`, description: desc, url: `http://127.0.0.1:9/t${i}`, parameters: { type: "object" } });
  }
  if (extra) tools.push({ name: extra, description: "added later", url: "http://127.0.0.1:9/extra", parameters: { type: "object" } });
  writeFileSync(file, JSON.stringify({ http_tools: tools }));
}

/** A client of addr that counts its ListTools calls. */
function countingClient(addr: string): { client: ToolwireClient; calls: () => number } {
  let n = 0;
  const count: grpc.Interceptor = (options, next) => {
    if (options.method_definition.path.endsWith("/ListTools")) n++;
    return new grpc.InterceptingCall(next(options));
  };
  return { client: new ToolwireClient(addr, { channelOptions: { interceptors: [count] } }), calls: () => n };
}

describe("a catalog larger than a message", { skip: skipOwnServer }, () => {
  let server: OwnServer;
  let dir: string;
  let config: string;
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), "toolwire-list-"));
    config = join(dir, "toolwire.yaml");
    catalogConfig(config, 1200); // 5.4 MB of declarations
    server = await startServer({ args: ["--config", config] });
  });
  after(async () => {
    await server.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  test("listTools returns every tool, a page at a time", async () => {
    const { client, calls } = countingClient(server.addr);
    try {
      const all = await client.listTools();
      // The catalog's 1,200 tools, and the server's own (--diag's, the workspace's).
      assert.equal(all.tools.filter((t: Tool) => t.name.startsWith("tool_")).length, 1200);
      assert.ok(all.tools.length > 1200);
      assert.equal(all.nextPageToken, "");
      assert.ok(all.revision);
      const names = all.tools.map((t: Tool) => t.name);
      assert.deepEqual(names, [...names].sort());
      assert.equal(new Set(names).size, names.length);
      assert.ok(calls() >= 2, `${calls()} ListTools calls: 5.4 MB in pages within 4 MiB takes 2 or more`);
      const before = calls();
      assert.deepEqual((await client.listTools({ pageSize: 100 })).tools.map((t: Tool) => t.name), names);
      assert.equal(calls() - before, Math.ceil(names.length / 100));
    } finally {
      client.close();
    }
  });

  test("a page token of an earlier revision is ABORTED; listTools then lists the new one", async () => {
    const client = new ToolwireClient(server.addr);
    try {
      const count = (await client.listTools()).tools.length;
      const first = await new Promise<ListToolsResponse>((resolve, reject) =>
        client.raw.listTools(ListToolsRequest.fromPartial({ pageSize: 2 }), (err, res) => (err ? reject(err) : resolve(res))),
      );
      catalogConfig(config, 1200, "aaa_added");
      server.hangUp();
      // The server reads its config again: wait for the new revision.
      for (let i = 0; (await client.listTools({ pageSize: 1000 })).revision === first.revision; i++) {
        assert.ok(i < 200, "the server did not take the new config");
        await new Promise((r) => setTimeout(r, 50));
      }
      await assert.rejects(
        new Promise((resolve, reject) =>
          client.raw.listTools(ListToolsRequest.fromPartial({ pageSize: 2, pageToken: first.nextPageToken }), (err, res) => (err ? reject(err) : resolve(res))),
        ),
        (err: grpc.ServiceError) => err.code === status.ABORTED && /list them again from the first page/.test(err.details),
      );
      const again = await client.listTools();
      assert.equal(again.tools[0].name, "aaa_added");
      assert.equal(again.tools.length, count + 1);
    } finally {
      client.close();
    }
  });
});

/** A stub ToolService whose ListTools answers page as it says, counting. */
async function stubServer(page: (req: ListToolsRequest, n: number) => ListToolsResponse | grpc.ServiceError): Promise<{ addr: string; stop: () => void; calls: () => number }> {
  const server = new grpc.Server();
  let n = 0;
  server.addService(ToolServiceService, {
    listTools: (call: grpc.ServerUnaryCall<ListToolsRequest, ListToolsResponse>, cb: grpc.sendUnaryData<ListToolsResponse>) => {
      const res = page(call.request, ++n);
      if (res instanceof Error) cb(res);
      else cb(null, res);
    },
  } as unknown as grpc.UntypedServiceImplementation);
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync("127.0.0.1:0", grpc.ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p))),
  );
  return { addr: `127.0.0.1:${port}`, stop: () => server.forceShutdown(), calls: () => n };
}

const tool = (name: string) => Tool.fromPartial({ name });
const aborted = () => Object.assign(new Error("the tools changed"), { code: status.ABORTED, details: "the tools changed", metadata: new grpc.Metadata() }) as grpc.ServiceError;

describe("listTools against other servers", () => {
  test("it starts over when the tools change between pages, and gives up after three restarts", async () => {
    // Pages of one tool: a, then b, then c; the second page of the first
    // listing is refused as a server refuses a token of an earlier revision.
    const stub = await stubServer((req, n) => {
      if (n === 2) return aborted();
      const names = ["a", "b", "c"];
      const i = req.pageToken ? names.indexOf(req.pageToken) + 1 : 0;
      return ListToolsResponse.fromPartial({ tools: [tool(names[i])], revision: n === 1 ? "r1" : "r2", nextPageToken: i < 2 ? names[i] : "" });
    });
    const client = new ToolwireClient(stub.addr);
    try {
      const all = await client.listTools({ pageSize: 1 });
      assert.deepEqual(all.tools.map((t) => t.name), ["a", "b", "c"]);
      assert.equal(all.revision, "r2");
      assert.equal(stub.calls(), 5); // a, refused, then a, b, c
    } finally {
      client.close();
      stub.stop();
    }
    const always = await stubServer((req) => (req.pageToken ? aborted() : ListToolsResponse.fromPartial({ tools: [tool("a")], revision: "r", nextPageToken: "a" })));
    const client2 = new ToolwireClient(always.addr);
    try {
      await assert.rejects(client2.listTools(), (err) => err instanceof ToolwireError && err.code === status.ABORTED);
      assert.equal(always.calls(), 8); // four listings of two pages
    } finally {
      client2.close();
      always.stop();
    }
  });

  test("a server that does not page is listed in one call; pages that do not advance are an error", async () => {
    const sizes: number[] = [];
    const old = await stubServer((req) => {
      sizes.push(req.pageSize);
      return ListToolsResponse.fromPartial({ tools: [tool("a"), tool("b")], revision: "r" });
    });
    const client = new ToolwireClient(old.addr);
    try {
      assert.equal((await client.listTools({ pageSize: 1 })).tools.length, 2);
      assert.equal(old.calls(), 1);
      await client.listTools({ pageSize: 0 });
      await client.listTools();
      assert.deepEqual(sizes, [1, 1000, 1000]); // 0 or unset: the most a page holds, never "everything at once"
    } finally {
      client.close();
      old.stop();
    }
    const stuck = await stubServer(() => ListToolsResponse.fromPartial({ tools: [tool("a")], revision: "r", nextPageToken: "more" }));
    const client2 = new ToolwireClient(stuck.addr);
    try {
      await assert.rejects(client2.listTools(), /do not advance/);
      assert.equal(stuck.calls(), 2);
    } finally {
      client2.close();
      stuck.stop();
    }
  });

  test("pages from replicas of two versions: an old one's whole listing is the listing", async () => {
    // In a rolling upgrade a balancer sends the second page's request to a
    // replica that predates paging, which answers with every tool: that is
    // the listing, whatever its revision, where listTools failed ("the
    // server's pages do not advance", or ABORTED).
    for (const oldRevision of ["r1", "r0"]) {
      const mixed = await stubServer((req) =>
        req.pageToken
          ? ListToolsResponse.fromPartial({ tools: [tool("a"), tool("b"), tool("c")], revision: oldRevision })
          : ListToolsResponse.fromPartial({ tools: [tool("a")], revision: "r1", nextPageToken: "t" }),
      );
      const client = new ToolwireClient(mixed.addr);
      try {
        const res = await client.listTools({ pageSize: 1 });
        assert.deepEqual([res.tools.map((t) => t.name), res.revision, res.nextPageToken], [["a", "b", "c"], oldRevision, ""]);
        assert.equal(mixed.calls(), 2);
      } finally {
        client.close();
        mixed.stop();
      }
    }
  });
});

describe("searchTools", { skip }, () => {
  let client: ToolwireClient;
  before(() => (client = new ToolwireClient(addr)));
  after(() => client.close());

  test("finds the best matches, counted", async () => {
    const found = await client.searchTools("given message");
    assert.deepEqual(found.tools.map((t) => t.name), ["fail"]);
    assert.equal(found.totalMatches, 1);
    assert.ok(found.revision);
    const some = await client.searchTools("GIVEN", { maxResults: 2 });
    assert.equal(some.tools.length, 2);
    assert.equal(some.totalMatches, 3);
  });

  test("an empty query is INVALID_ARGUMENT", async () => {
    await assert.rejects(client.searchTools("  "), (err) => err instanceof ToolwireError && err.code === status.INVALID_ARGUMENT && /the query is empty/.test(err.details));
  });
});
