// The Connect protocol's JSON flavour over fetch: unary calls, and server
// streams in 5-byte enveloped frames (one flag byte, a big-endian length)
// read off the response's ReadableStream. Nothing else talks to the server.

const tokenKey = "toolwire.token";

/** The bearer token, kept for this tab only (sessionStorage, never the URL). */
export function token() {
  return sessionStorage.getItem(tokenKey) || "";
}

export function setToken(t) {
  if (t) sessionStorage.setItem(tokenKey, t);
  else sessionStorage.removeItem(tokenKey);
}

/** An error the server answered, with its Connect code ("unauthenticated", …). */
export class RPCError extends Error {
  constructor(code, message) {
    super(message || code);
    this.code = code;
  }
}

function headers(contentType) {
  const h = { "Content-Type": contentType, "Connect-Protocol-Version": "1" };
  const t = token();
  if (t) h.Authorization = "Bearer " + t;
  return h;
}

async function errorOf(resp) {
  let body = {};
  try {
    body = await resp.json();
  } catch {
    // not a Connect error body
  }
  return new RPCError(body.code || "http_" + resp.status, body.message || resp.statusText);
}

/** unary calls service/method with the message msg and returns the answer. */
export async function unary(service, method, msg, signal) {
  const resp = await fetch(`/${service}/${method}`, {
    method: "POST",
    headers: headers("application/json"),
    body: JSON.stringify(msg || {}),
    signal,
  });
  if (!resp.ok) throw await errorOf(resp);
  return resp.json();
}

/** envelope frames one message for a stream request. */
function envelope(msg) {
  const data = new TextEncoder().encode(JSON.stringify(msg || {}));
  const out = new Uint8Array(5 + data.length);
  new DataView(out.buffer).setUint32(1, data.length);
  out.set(data, 5);
  return out;
}

/**
 * frames yields the enveloped frames of a stream as {flags, data}; exported
 * for the page's own checks.
 */
export async function* frames(stream) {
  const reader = stream.getReader();
  let buf = new Uint8Array(0);
  for (;;) {
    while (buf.length >= 5) {
      const len = new DataView(buf.buffer, buf.byteOffset + 1, 4).getUint32(0);
      if (buf.length < 5 + len) break;
      yield { flags: buf[0], data: buf.slice(5, 5 + len) };
      buf = buf.slice(5 + len);
    }
    const { value, done } = await reader.read();
    if (done) {
      if (buf.length > 0) throw new RPCError("data_loss", "the stream ended inside a frame");
      return;
    }
    const next = new Uint8Array(buf.length + value.length);
    next.set(buf);
    next.set(value, buf.length);
    buf = next;
  }
}

const endStream = 0x02;

/**
 * serverStream calls a server-streaming method and hands each message to
 * onMessage; it resolves when the stream ends well and throws an RPCError
 * when it ends with one.
 */
export async function serverStream(service, method, msg, onMessage, signal) {
  const resp = await fetch(`/${service}/${method}`, {
    method: "POST",
    headers: headers("application/connect+json"),
    body: envelope(msg),
    signal,
  });
  if (!resp.ok) throw await errorOf(resp);
  const text = new TextDecoder();
  for await (const f of frames(resp.body)) {
    const obj = f.data.length ? JSON.parse(text.decode(f.data)) : {};
    if (f.flags & endStream) {
      if (obj.error) throw new RPCError(obj.error.code, obj.error.message);
      return;
    }
    onMessage(obj);
  }
  throw new RPCError("data_loss", "the stream ended without its end frame");
}

// Restart is thrown when the registry changed between two pages.
class Restart extends Error {}

/** The page size listAll asks for: the most the server gives in a page. */
export const pageSize = 1000;

/**
 * listAll asks for every tool with call(ListToolsRequest), which returns a
 * ListToolsResponse: page after page while the server gives a
 * next_page_token (a server that does not page answers with all of them
 * at once). Should the registry change between pages (another revision,
 * or a token refused, ABORTED), it starts again, up to three times. It
 * resolves to {tools, revision}.
 */
export async function listAll(call) {
  for (let attempt = 0; ; attempt++) {
    let pageToken = "";
    try {
      const tools = [];
      let revision;
      const seen = new Set();
      for (;;) {
        const resp = await call(pageToken ? { pageSize, pageToken } : { pageSize });
        if (revision === undefined) revision = resp.revision || "";
        else if ((resp.revision || "") !== revision) throw new Restart("the tools changed while they were listed");
        tools.push(...(resp.tools || []));
        const next = resp.nextPageToken || "";
        if (!next) return { tools, revision };
        if (seen.has(next)) throw new RPCError("internal", "ListTools gave a page token it had given before: the listing does not advance");
        seen.add(next);
        pageToken = next;
      }
    } catch (err) {
      const again = err instanceof Restart || (pageToken && err instanceof RPCError && err.code === "aborted");
      if (again && attempt < 3) continue;
      throw err;
    }
  }
}

export const tools = "toolwire.v1.ToolService";
export const admin = "toolwire.v1.AdminService";
