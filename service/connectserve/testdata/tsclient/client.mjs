// Calls toolwire's HTTP port as a browser and Connect's own clients do:
//
//   node client.mjs http://127.0.0.1:8080 TOKEN
//
// 1. a browser-style fetch of CallTool in the Connect protocol's JSON, and
//    the same without a token (401 and a Connect error body);
// 2. @connectrpc/connect over connect-web's transport (fetch, JSON, what a
//    page runs): ListTools, CallTool, an ExecuteBatch stream, a wrong
//    token, a call aborted by its signal;
// 3. @connectrpc/connect-node's gRPC-Web transport (binary): an
//    ExecuteBatch stream.
// It exits non-zero, saying what failed, on the first surprise.
import assert from "node:assert/strict";
import { createClient, ConnectError, Code } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-web";
import { createGrpcWebTransport } from "@connectrpc/connect-node";
import { ToolService } from "./gen/toolwire/v1/toolwire_pb.js";

const [baseUrl, token] = process.argv.slice(2);
if (!baseUrl || !token) {
  console.error("usage: node client.mjs BASE_URL TOKEN");
  process.exit(2);
}
const bearer = { Authorization: `Bearer ${token}` };

// 1. fetch, as a page would.
async function fetchCallTool(headers) {
  const res = await fetch(`${baseUrl}/toolwire.v1.ToolService/CallTool`, {
    method: "POST",
    headers: { "Content-Type": "application/json", "Connect-Protocol-Version": "1", ...headers },
    body: JSON.stringify({ call: { callId: "f1", name: "echo", arguments: JSON.stringify({ text: "from fetch" }) } }),
  });
  return { status: res.status, headers: res.headers, body: await res.json() };
}
{
  const { status, body } = await fetchCallTool(bearer);
  assert.equal(status, 200, JSON.stringify(body));
  assert.equal(body.result.callId, "f1");
  assert.equal(body.result.content[0].text.text, "from fetch");
  console.log("fetch CallTool:", JSON.stringify(body));
}
{
  const { status, headers, body } = await fetchCallTool({});
  assert.equal(status, 401);
  assert.equal(body.code, "unauthenticated");
  assert.match(headers.get("WWW-Authenticate") ?? "", /^Bearer/);
  console.log("fetch without a token:", status, JSON.stringify(body));
}

// 2. Connect's client over fetch, JSON.
const web = createClient(ToolService, createConnectTransport({ baseUrl, useBinaryFormat: false }));
{
  const list = await web.listTools({}, { headers: bearer });
  const names = list.tools.map((t) => t.name);
  assert.ok(names.includes("echo") && names.includes("sleep"), `tools: ${names}`);
  const { result } = await web.callTool(
    { call: { callId: "c1", name: "echo", arguments: JSON.stringify({ text: "connect-web" }) } },
    { headers: bearer },
  );
  assert.equal(result.callId, "c1");
  assert.equal(result.isError, false);
  assert.equal(result.content[0].block.value.text, "connect-web");
  console.log("connect-web listTools and callTool:", names.length, "tools;", result.content[0].block.value.text);
}
async function batchEvents(client, label) {
  const kinds = [];
  let text = "";
  const calls = [
    { callId: "a", name: "echo", arguments: JSON.stringify({ text: label }) },
    { callId: "b", name: "sleep", arguments: JSON.stringify({ ms: 50 }) },
    { callId: "c", name: "nope", arguments: "{}" },
  ];
  for await (const ev of client.executeBatch({ calls }, { headers: bearer })) {
    kinds.push(ev.event.case);
    if (ev.event.case === "result" && ev.event.value.callId === "a") text = ev.event.value.content[0].block.value.text;
  }
  assert.equal(kinds[0], "accepted", kinds.join());
  assert.equal(kinds.at(-1), "finished", kinds.join());
  assert.equal(kinds.filter((k) => k === "result").length, 3, kinds.join());
  assert.equal(text, label);
  console.log(`${label} executeBatch:`, kinds.join(" "));
}
await batchEvents(web, "connect-web");
{
  await assert.rejects(
    web.listTools({}, { headers: { Authorization: "Bearer wrong-token-0123456789" } }),
    (err) => err instanceof ConnectError && err.code === Code.Unauthenticated,
  );
  const started = Date.now();
  await assert.rejects(
    web.callTool(
      { call: { callId: "s1", name: "sleep", arguments: JSON.stringify({ ms: 60000 }) } },
      { headers: bearer, signal: AbortSignal.timeout(300) },
    ),
    (err) => err instanceof ConnectError && [Code.Canceled, Code.DeadlineExceeded].includes(err.code),
  );
  assert.ok(Date.now() - started < 10000, "the aborted call took too long");
  console.log("connect-web: a wrong token is Unauthenticated; an aborted call ends at once");
}

// 3. gRPC-Web from Node, binary.
await batchEvents(createClient(ToolService, createGrpcWebTransport({ baseUrl, httpVersion: "1.1" })), "grpc-web");
console.log("ok");
