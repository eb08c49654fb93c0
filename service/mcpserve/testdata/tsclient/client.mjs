// client.mjs drives toolwire's /mcp with the official TypeScript SDK's
// clients: v1 (@modelcontextprotocol/sdk), which speaks 2025-11-25 with
// sessions, and v2 (@modelcontextprotocol/client), pinned to the stateless
// 2026-07-28. mcpserve's TestTypeScriptClients starts the server and runs
//
//	node client.mjs URL TOKEN
//
// It prints a line per check and exits 1 if any failed.
import { Client as ClientV1 } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport as TransportV1 } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ToolListChangedNotificationSchema } from '@modelcontextprotocol/sdk/types.js';
import { Client as ClientV2, StreamableHTTPClientTransport as TransportV2 } from '@modelcontextprotocol/client';

const [url, token] = process.argv.slice(2);
let failed = 0;

function check(flavor, what, ok, detail) {
  console.log(`${ok ? 'ok  ' : 'FAIL'} ${flavor}: ${what}${ok || detail === undefined ? '' : ' — ' + JSON.stringify(detail)}`);
  if (!ok) failed++;
}

// callTool's options: v1 takes them third (after a result schema), v2
// second.
const flavors = {
  v1: {
    call: (client, params, options) => client.callTool(params, undefined, options),
    revision: '2025-11-25',
    connect: async (tok, onListChanged) => {
      const client = new ClientV1({ name: 'ts-v1', version: '0' });
      if (onListChanged) client.setNotificationHandler(ToolListChangedNotificationSchema, onListChanged);
      const transport = new TransportV1(new URL(url), { requestInit: { headers: { Authorization: `Bearer ${tok}` } } });
      await client.connect(transport);
      return { client, revision: transport.protocolVersion, session: transport.sessionId };
    },
  },
  v2: {
    call: (client, params, options) => client.callTool(params, options),
    revision: '2026-07-28',
    connect: async (tok, onListChanged) => {
      const client = new ClientV2({ name: 'ts-v2', version: '0' }, {
        versionNegotiation: { mode: { pin: '2026-07-28' } },
        ...(onListChanged ? { listChanged: { tools: { autoRefresh: false, onChanged: () => onListChanged() } } } : {}),
      });
      const transport = new TransportV2(new URL(url), { requestInit: { headers: { Authorization: `Bearer ${tok}` } } });
      await client.connect(transport);
      return { client, revision: client.getNegotiatedProtocolVersion?.() ?? transport.protocolVersion, session: transport.sessionId };
    },
  },
};

async function run(flavor) {
  const f = flavors[flavor];
  let changed;
  const listChanged = new Promise((resolve) => { changed = resolve; });
  const { client, revision, session } = await f.connect(token, () => changed());
  check(flavor, `negotiated ${f.revision}`, revision === f.revision, revision);
  check(flavor, f.revision === '2026-07-28' ? 'no session' : 'a session', (session === undefined) === (f.revision === '2026-07-28'), session);

  const list = await client.listTools();
  const names = list.tools.map((t) => t.name);
  check(flavor, 'tools/list has echo, image, hold, grow', ['echo', 'image', 'hold', 'grow'].every((n) => names.includes(n)), names);
  const echo = list.tools.find((t) => t.name === 'echo');
  check(flavor, 'echo is read-only and idempotent, not destructive', echo?.annotations?.readOnlyHint === true && echo.annotations.idempotentHint === true && echo.annotations.destructiveHint === false, echo?.annotations);
  check(flavor, 'echo has its schemas', echo?.inputSchema?.properties?.text?.type === 'string' && echo?.outputSchema?.type === 'object', echo);
  check(flavor, 'tools/list names the revision in _meta', typeof list._meta?.['toolwire.dev/revision'] === 'string', list._meta);

  let res = await client.callTool({ name: 'echo', arguments: { text: 'héllo' } });
  check(flavor, 'echo: text and structuredContent', res.content?.[0]?.text === 'héllo' && res.structuredContent?.text === 'héllo' && !res.isError, res);

  res = await client.callTool({ name: 'image', arguments: {} });
  const img = res.content?.find((c) => c.type === 'image');
  check(flavor, 'image: an image block', img?.mimeType === 'image/png' && img.data === 'iVBORw0KGgo=', res);

  res = await client.callTool({ name: 'fail', arguments: { message: 'boom' } });
  check(flavor, 'fail: isError with error_kind in _meta', res.isError === true && res._meta?.['toolwire.dev/error_kind'] === 'TOOL_ERROR' && res.content?.[0]?.text === 'boom', res);

  res = await client.callTool({ name: 'nope', arguments: {} });
  check(flavor, 'unknown tool: a result, not an error', res.isError === true && res._meta?.['toolwire.dev/error_kind'] === 'UNKNOWN_TOOL', res);

  const key = { 'toolwire.dev/idempotency_key': `k-${flavor}` };
  await client.callTool({ name: 'echo', arguments: { text: 'once' }, _meta: key });
  res = await client.callTool({ name: 'echo', arguments: { text: 'once' }, _meta: key });
  check(flavor, 'a retried call with its idempotency key replays', res._meta?.['toolwire.dev/replayed'] === true && res.content?.[0]?.text === 'once', res._meta);

  const progress = [];
  res = await f.call(client, { name: 'count', arguments: {} }, { onprogress: (p) => progress.push(p) });
  check(flavor, 'count: 10 notifications of growing progress before the result', progress.length === 10 && progress.every((p, i) => p.total === 5 && (i === 0 || p.progress > progress[i - 1].progress)) && res.content?.[0]?.text === 'counted', progress);

  const abort = new AbortController();
  let held = false;
  const hold = f.call(client, { name: 'hold', arguments: {}, _meta: { 'toolwire.dev/call_id': `held-${flavor}` } }, {
    signal: abort.signal,
    onprogress: () => { held = true; abort.abort(); },
  });
  const outcome = await hold.then(() => 'returned', (e) => (abort.signal.aborted ? 'aborted' : `error ${e}`));
  check(flavor, 'hold: aborting the call cancels it', held && outcome === 'aborted', outcome);

  res = await client.callTool({ name: 'grow', arguments: { name: `grown_${flavor}` } });
  const noticed = await Promise.race([listChanged.then(() => true), new Promise((r) => setTimeout(() => r(false), 5000))]);
  check(flavor, 'a tool added to the registry: list-changed notice', noticed);
  const after = await client.listTools();
  check(flavor, 'the next tools/list has the new tool', after.tools.some((t) => t.name === `grown_${flavor}`), after.tools.map((t) => t.name));

  await client.close();

  let refused;
  try {
    const c = await f.connect('wrong-token');
    await c.client.close();
    refused = 'connected';
  } catch (e) {
    refused = String(e);
  }
  check(flavor, 'a wrong token is refused (401)', /401|nauthori|unauthenticated/.test(refused), refused);
}

for (const flavor of ['v1', 'v2']) {
  try {
    await run(flavor);
  } catch (e) {
    check(flavor, 'ran to the end', false, String(e?.stack ?? e));
  }
}
process.exit(failed ? 1 : 0);
