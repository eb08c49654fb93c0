// The typed toolwire client over @grpc/grpc-js: the Go client's surface
// (ListTools a page at a time, SearchTools, ExecuteBatch as a stream of
// events, Collect into batch order, CallTool for one call, WatchTools,
// bearer tokens and TLS) for Node.js.

import * as grpc from "@grpc/grpc-js";
import {
  AttachBatchRequest,
  BatchAccepted,
  BatchFinished,
  BatchOptions,
  CallResult,
  CallToolRequest,
  ExecuteBatchRequest,
  ExecuteBatchResponse,
  ListToolsRequest,
  ListToolsResponse,
  SearchToolsRequest,
  SearchToolsResponse,
  Tool,
  ToolCall,
  ToolServiceClient,
  ToolServiceService,
  WatchToolsRequest,
  WatchToolsResponse,
} from "./gen/toolwire/v1/toolwire.js";
import { retryDelayOf } from "./retry.js";

/** How to reach a toolwire server. */
export interface ClientOptions {
  /** Sent as "authorization: Bearer <token>" on every RPC. Needs TLS unless
   * insecureToken is set (a token over plaintext is readable by anyone on
   * the path). Default: none. */
  token?: string;
  /** Send the token over a plaintext connection too (tests, loopback). */
  insecureToken?: boolean;
  /** TLS: true for the system's roots, or PEM buffers for a private CA and a
   * client certificate (mutual TLS). Default: plaintext. */
  tls?: true | { rootCerts?: Buffer; privateKey?: Buffer; certChain?: Buffer };
  /** Extra @grpc/grpc-js channel options, e.g. {"grpc.service_config": …};
   * they override the client's own: "grpc.keepalive_time_ms" (30000),
   * "grpc.keepalive_timeout_ms" (10000), "grpc.keepalive_permit_without_calls"
   * (0) and "grpc.max_receive_message_length" (64 MiB). */
  channelOptions?: grpc.ClientOptions;
  /** Re-attach automatically when a detached batch's stream drops
   * (UNAVAILABLE, INTERNAL, UNKNOWN, ABORTED): AttachBatch from the last seq
   * seen, up to attempts times in a row, waiting backoffMs (doubling, up to
   * 5 s) before each, within the RPC's timeoutMs, which bounds the whole
   * of it; aborting the RPC's signal ends a wait at once (CANCELLED).
   * Applies to executeBatch with options.detach and to attachBatch. A
   * connection that goes silent (a frozen server, a path
   * that black-holes packets) counts as dropped once a keepalive ping goes
   * unanswered: within 40 s by default (channelOptions' keepalive values).
   * Default: off, a dropped stream throws. */
  reattach?: { attempts: number; backoffMs: number };
  /** How many times executeBatch and callTool (and so the StepBatcher and
   * the adapters) wait out a refusal that says when to retry
   * (RESOURCE_EXHAUSTED with a google.rpc.RetryInfo, what a server's rate
   * limit sends) and send the batch or call again: such a refusal comes
   * before anything ran, so sending it again is safe. The wait ends early,
   * with the refusal, when the RPC's signal aborts, and is not begun when
   * the retry would start past its deadline (timeoutMs) or the delay is
   * over a minute. Default 3; 0
   * rejects with the refusal at once (see retryDelay). */
  rateLimitRetries?: number;
  /** Called before each such wait, with the refusal and the delay in ms
   * (for a log line or a UI). */
  onRateLimit?: (err: ToolwireError, delayMs: number) => void;
}

/** Per-RPC options. */
export interface CallOptions {
  /** Aborting cancels the RPC; for ExecuteBatch the server cancels the
   * batch's running calls. */
  signal?: AbortSignal;
  /** The RPC's deadline as milliseconds from now (for a stream, from when
   * iteration starts). With the reattach option it is one deadline for the
   * whole batch, re-attaches and the waits before them included: a stream
   * re-attached gets what is left of it, and none is opened past it.
   * Default: none for streams, 30 s for ListTools. */
  timeoutMs?: number;
}

/** What listTools takes besides CallOptions. */
export interface ListOptions {
  /** Tools asked for per page. Default (and for 0 or less) 1000, the most
   * a server's page holds. */
  pageSize?: number;
  /** The most one listing reads, in bytes of responses. Default (and for 0
   * or less) 64 MiB. */
  maxBytes?: number;
  /** The most pages one listing reads. Default (and for 0 or less)
   * 10,000. */
  maxPages?: number;
}

/** A call as a caller writes it. */
export interface CallInput {
  callId: string;
  name: string;
  /** JSON text exactly as the model produced it, or a value to encode as
   * JSON. Default: {}. */
  arguments?: unknown;
  idempotencyKey?: string;
  timeoutMs?: number;
}

/** What callTool sends besides the tool's name and arguments. */
export interface CallToolOptions {
  /** The call's ID, echoed in its result. Default "call". */
  callId?: string;
  /** The session the call belongs to. Default: none. */
  sessionId?: string;
  /** Makes a retried call replay its first result instead of running again. */
  idempotencyKey?: string;
  /** The call's own timeout in milliseconds. Default: the tool's or the
   * server's. */
  callTimeoutMs?: number;
}

/** A whole batch as collect returns it: its plan, one result per call in
 * batch order (results[i] is the result of the request's call i, whatever
 * order the calls finished in), and its summary. */
export interface Batch {
  accepted?: BatchAccepted;
  results: CallResult[];
  finished?: BatchFinished;
}

/** What had arrived of a batch when collect rejected (a ToolwireError's
 * batch): results[i] is still call i's, undefined for a call without a
 * result; accepted and finished are undefined when they did not arrive. */
export interface PartialBatch {
  accepted?: BatchAccepted;
  results: (CallResult | undefined)[];
  finished?: BatchFinished;
}

/** A toolwire client. Close it when done. */
export class ToolwireClient {
  /** The generated grpc-js client, for anything this class does not wrap. */
  readonly raw: ToolServiceClient;
  private readonly rateLimitRetries: number;
  private readonly onRateLimit?: (err: ToolwireError, delayMs: number) => void;

  private readonly reattach?: { attempts: number; backoffMs: number };

  constructor(target: string, opts: ClientOptions = {}) {
    this.raw = new ToolServiceClient(target, credentials(opts), channelOptions(opts));
    this.reattach = opts.reattach;
    this.rateLimitRetries = Math.max(0, Math.floor(opts.rateLimitRetries ?? DEFAULT_RATE_LIMIT_RETRIES));
    this.onRateLimit = opts.onRateLimit;
  }

  close(): void {
    this.raw.close();
  }

  /** Every tool the caller may call, sorted by name, and the registry's
   * revision, in one response however large the catalog: it asks for them
   * a page at a time (pageSize tools; when unset or 0 or less, 1000, the
   * most a server's page holds) and puts the pages together. When the
   * tools change between its pages (the server answers ABORTED) it starts
   * over, up to three times, so that every tool belongs to the one revision
   * it returns. A server that predates paging answers the first request
   * with every tool. timeoutMs (default 30 s) bounds each page. One
   * listing reads at most maxBytes of responses (default 64 MiB, a
   * server's max_list_bytes default) and maxPages pages (default 10,000),
   * and rejects with RESOURCE_EXHAUSTED past either: a server whose pages
   * never end costs a bounded amount; a page token named twice rejects at
   * once. */
  async listTools(opts: CallOptions & ListOptions = {}): Promise<ListToolsResponse> {
    for (let restart = 0; ; restart++) {
      try {
        return await this.listPages(opts);
      } catch (err) {
        if (!(err instanceof ToolwireError) || err.code !== grpc.status.ABORTED || restart >= LIST_RESTARTS) throw err;
      }
    }
  }

  /** Every tool, a page at a time, from the first page. */
  private async listPages(opts: CallOptions & ListOptions): Promise<ListToolsResponse> {
    const all = ListToolsResponse.fromPartial({});
    const maxBytes = opts.maxBytes && opts.maxBytes > 0 ? opts.maxBytes : DEFAULT_LIST_BYTES;
    const maxPages = opts.maxPages && opts.maxPages > 0 ? opts.maxPages : DEFAULT_LIST_PAGES;
    const tokens = new Set<string>();
    // The bytes of the responses as received, counted as they are decoded.
    let read = 0;
    const { path, requestSerialize, responseDeserialize } = ToolServiceService.listTools;
    const decode = (b: Buffer) => ((read += b.length), responseDeserialize(b));
    for (let page = 1; ; page++) {
      const req = ListToolsRequest.fromPartial({ pageSize: opts.pageSize && opts.pageSize > 0 ? opts.pageSize : DEFAULT_PAGE_SIZE, pageToken: all.nextPageToken });
      const resp = await this.unary<ListToolsRequest, ListToolsResponse>((req, md, o, cb) => this.raw.makeUnaryRequest(path, requestSerialize, decode, req, md, o, (err, res) => cb(err, res!)), req, opts);
      if (read > maxBytes) {
        throw new ToolwireError(grpc.status.RESOURCE_EXHAUSTED, `ListTools read ${page} pages, more than ${maxBytes >> 20} MiB, without reaching the last: the listing is larger than the client's bound (maxBytes)`);
      }
      const first = all.tools[0];
      if (page > 1 && !resp.nextPageToken && resp.tools.length > 0 && first && resp.tools[0].name <= first.name) {
        // A page from the start and the last: a server that predates
        // paging, which a balancer sent this page to in a rolling upgrade,
        // answers a page token with every tool. That answer is the whole
        // listing, of one revision.
        return resp;
      }
      if (page === 1) all.revision = resp.revision;
      else if (resp.revision !== all.revision) {
        throw new ToolwireError(grpc.status.ABORTED, `the tools changed between pages (revision ${all.revision}, then ${resp.revision})`);
      }
      // Each page must go on from the last: a server whose pages do not
      // would keep this loop going forever.
      const last = all.tools[all.tools.length - 1];
      if ((resp.tools.length > 0 && last && resp.tools[0].name <= last.name) || (resp.tools.length === 0 && resp.nextPageToken)) {
        throw new ToolwireError(grpc.status.INTERNAL, `page ${page} of ListTools does not go on after ${JSON.stringify(last?.name ?? "")}: the server's pages do not advance`);
      }
      all.tools.push(...resp.tools);
      all.nextPageToken = resp.nextPageToken;
      if (!all.nextPageToken) return all;
      if (tokens.has(all.nextPageToken)) {
        throw new ToolwireError(grpc.status.INTERNAL, `page ${page} of ListTools names a page token it named before: the server's pages do not advance`);
      }
      tokens.add(all.nextPageToken);
      if (page >= maxPages) {
        throw new ToolwireError(grpc.status.RESOURCE_EXHAUSTED, `ListTools read ${page} pages without reaching the last: the listing is longer than the client's bound (maxPages)`);
      }
    }
  }

  /** The tools the caller may call that match query, best first, at most
   * maxResults of them (default 10, at most 100), and how many match in
   * all (totalMatches): for a runtime that hands its model only the tools
   * a step needs. A query matches a tool when each of its words, and
   * "quoted phrases", occurs in the tool's name, title, description or
   * source, ignoring case. An empty query rejects with INVALID_ARGUMENT.
   * timeoutMs defaults to 30 s. */
  searchTools(query: string, opts: CallOptions & { maxResults?: number } = {}): Promise<SearchToolsResponse> {
    const req = SearchToolsRequest.fromPartial({ query, maxResults: opts.maxResults ?? 0 });
    return this.unary<SearchToolsRequest, SearchToolsResponse>((req, md, o, cb) => this.raw.searchTools(req, md, o, cb), req, opts);
  }

  /** One unary RPC with opts' deadline (30 s by default) and signal. */
  private unary<Req, Res>(
    start: (req: Req, md: grpc.Metadata, o: grpc.CallOptions, cb: (err: grpc.ServiceError | null, res: Res) => void) => grpc.ClientUnaryCall,
    req: Req,
    opts: CallOptions,
  ): Promise<Res> {
    return new Promise((resolve, reject) => {
      const call = start(req, new grpc.Metadata(), { deadline: Date.now() + (opts.timeoutMs ?? 30_000) }, (err, res) =>
        err ? reject(ToolwireError.from(err)) : resolve(res),
      );
      const stop = onAbort(opts.signal, () => call.cancel());
      call.on("status", stop);
    });
  }

  /** Runs calls as one batch and yields its events as they arrive. Breaking
   * out of the loop or aborting opts.signal cancels the RPC; an RPC that
   * ends in an error status throws a ToolwireError. A refusal that says
   * when to retry (a rate limit's, before any event) is waited out and the
   * batch sent again, up to rateLimitRetries times (see ClientOptions). */
  executeBatch(
    calls: CallInput[] | ExecuteBatchRequest,
    opts: CallOptions & { sessionId?: string; options?: Partial<BatchOptions> } = {},
  ): AsyncIterable<ExecuteBatchResponse> {
    const req = Array.isArray(calls)
      ? ExecuteBatchRequest.fromPartial({
          calls: calls.map(toCall),
          sessionId: opts.sessionId ?? "",
          options: opts.options ? BatchOptions.fromPartial(opts.options) : undefined,
        })
      : calls;
    if (this.reattach && req.options?.detach) {
      return this.follow("", 0, (o) => this.raw.executeBatch(req, o), opts);
    }
    const self = this;
    return (async function* () {
      // The deadline is the whole batch's, waits included; it starts when
      // iteration starts, as the RPC does.
      const deadline = opts.timeoutMs === undefined ? undefined : Date.now() + opts.timeoutMs;
      for (let attempt = 0; ; attempt++) {
        let retry = false;
        yield* stream(
          () => self.raw.executeBatch(req, deadline === undefined ? {} : { deadline }),
          opts.signal,
          async (err) => {
            retry = await self.waitToRetry(err, attempt, opts.signal, deadline);
            return retry;
          },
          isFinished,
        );
        if (!retry) return;
      }
    })();
  }

  /** Yields the events of the detached batch batchId numbered after afterSeq
   * (all of them for 0), then its live ones until finished, like
   * executeBatch: on any replica sharing the server's store. Breaking out
   * ends only this reader; the batch runs on. NOT_FOUND for an unknown,
   * expired or another caller's batch. With the reattach option it resumes
   * after a dropped stream. */
  attachBatch(batchId: string, afterSeq = 0, opts: CallOptions = {}): AsyncIterable<ExecuteBatchResponse> {
    const open = (o: grpc.CallOptions) => this.raw.attachBatch(AttachBatchRequest.fromPartial({ batchId, afterSeq }), o);
    return this.reattach ? this.follow(batchId, afterSeq, open, opts) : stream(() => open(callOptions(opts)), opts.signal, undefined, isFinished);
  }

  /** Yields a batch's events from the stream open makes, re-attaching with
   * AttachBatch from the last seq seen after a dropped stream, once the
   * batch's ID is known; events seen before a drop are not yielded again,
   * and one out of order (not the next seq) throws INTERNAL. A batch whose
   * first event is unnumbered is a plain one (its server predates durable
   * batches): its events are yielded as they come, its stream's end the
   * batch's.
   * opts.timeoutMs is one deadline for all of it, re-attaches and waits
   * included, from when iteration starts: each stream opened gets what is
   * left of it, and none is opened once it has passed. */
  private async *follow(
    batchId: string,
    last: number,
    open: (o: grpc.CallOptions) => grpc.ClientReadableStream<ExecuteBatchResponse>,
    opts: CallOptions,
  ): AsyncGenerator<ExecuteBatchResponse> {
    const { attempts, backoffMs } = this.reattach!;
    const deadline = opts.timeoutMs === undefined ? undefined : Date.now() + opts.timeoutMs;
    const within: grpc.CallOptions = deadline === undefined ? {} : { deadline };
    let failures = 0;
    let refusals = 0;
    let backoff = backoffMs;
    let plain = false; // the server predates numbered events (see below)
    for (;;) {
      let retried = false;
      // Refused before BatchAccepted (a rate limit's): nothing ran; send again.
      const retry = batchId || last
        ? undefined
        : async (err: ToolwireError) => (retried = await this.waitToRetry(err, refusals++, opts.signal, deadline));
      let fresh = 0; // events this stream brought
      let finished = false;
      try {
        for await (const ev of stream(() => open(within), opts.signal, retry, isFinished)) {
          if (plain || (!batchId && last === 0 && fresh === 0 && ev.seq === 0)) {
            // A server from before durable batches (met behind a balancer
            // in a rolling upgrade) numbers no events and knows no detach:
            // it runs the batch as a plain one, tied to this stream, with
            // nothing to re-attach to (the batch ID stays unknown here, so
            // none is tried). Its events are yielded as a plain batch's are.
            plain = true;
            finished = ev.finished !== undefined;
            yield ev;
            continue;
          }
          if (ev.seq !== 0 && ev.seq <= last) continue; // seen before a drop
          if (ev.seq !== last + 1) {
            // Events are numbered one after another: one that is not the
            // next means the server skipped or reordered some.
            throw new ToolwireError(grpc.status.INTERNAL, `the server sent event seq ${ev.seq} after seq ${last}: the batch's events are not in order (an event would be lost)`, { cause: OUT_OF_ORDER });
          }
          last = ev.seq;
          if (ev.accepted && !batchId) batchId = ev.accepted.batchId;
          failures = 0;
          backoff = backoffMs;
          fresh++;
          finished = ev.finished !== undefined;
          yield ev; // after BatchFinished the stream ends itself
        }
        if (retried) continue;
        // A stream that brought events and ended without BatchFinished was
        // cut short (a proxy or server that ended it as if done): a
        // re-attach has the rest. One that brought nothing ends here
        // (nothing follows, as after attachBatch from the last seq).
        if (finished || fresh === 0 || !batchId) return;
        throw new ToolwireError(grpc.status.UNAVAILABLE, "the stream ended before BatchFinished");
      } catch (err) {
        const e = ToolwireError.from(err);
        if (failures >= attempts || !batchId || opts.signal?.aborted || !DROPPED.has(e.code) || e.cause === OUT_OF_ORDER) throw e;
        // A re-attach that would start past the deadline is not waited for.
        if (deadline !== undefined && Date.now() + backoff >= deadline) throw e;
        failures++;
        await pause(backoff, opts.signal);
        backoff = Math.min(2 * backoff, 5000);
        const id = batchId;
        const after = last;
        open = (o) => this.raw.attachBatch(AttachBatchRequest.fromPartial({ batchId: id, afterSeq: after }), o);
      }
    }
  }

  /** Reads a batch's events (from executeBatch, or attachBatch after seq 0) to the end
   * and returns its results in batch order: results[i] is the result of the
   * request's call i. Progress events are dropped. It rejects with a
   * ToolwireError when the stream fails (that error's code), and with
   * INTERNAL when the stream is not a whole batch: it ends without
   * BatchAccepted, without a result for a call of the plan, or without
   * BatchFinished, or it brings a result for a call not in the plan, at
   * an index other than its call's place in the plan, or a second result
   * for a call, or a second BatchAccepted. Either way the error's batch holds what had
   * arrived (a PartialBatch), so that a runtime can tell which calls ran. */
  async collect(events: AsyncIterable<ExecuteBatchResponse>): Promise<Batch> {
    const batch: PartialBatch = { results: [] };
    // call ID → its place in the plan (its lanes in order: batch order),
    // and whether its result has come
    const planned = new Map<string, { place: number; done: boolean }>();
    const fail = (details: string) => new ToolwireError(grpc.status.INTERNAL, details, { batch });
    try {
      for await (const ev of events) {
        if (ev.accepted) {
          if (batch.accepted) throw fail("a second BatchAccepted");
          batch.accepted = ev.accepted;
          for (const lane of ev.accepted.lanes) {
            for (const id of lane.callIds) {
              if (planned.has(id)) throw fail(`the plan lists call ${JSON.stringify(id)} twice`);
              planned.set(id, { place: planned.size, done: false });
            }
          }
          batch.results = Array.from({ length: planned.size }, () => undefined);
        } else if (ev.result) {
          const r = ev.result;
          if (!batch.accepted) throw fail(`result for call ${JSON.stringify(r.callId)} before BatchAccepted`);
          if (!Number.isInteger(r.index) || r.index < 0 || r.index >= batch.results.length) {
            throw fail(`result for call ${JSON.stringify(r.callId)} has index ${r.index}; the batch has ${batch.results.length} calls`);
          }
          const p = planned.get(r.callId);
          if (p === undefined) throw fail(`result for call ${JSON.stringify(r.callId)}, which is not in the plan`);
          // A result is its call's by its ID: one whose index says another
          // place would be read as another call's.
          if (r.index !== p.place) throw fail(`result for call ${JSON.stringify(r.callId)} has index ${r.index}; its place in the plan is ${p.place}`);
          if (p.done) throw fail(`second result for call ${JSON.stringify(r.callId)}`);
          p.done = true;
          batch.results[r.index] = r;
        } else if (ev.finished) batch.finished = ev.finished;
      }
    } catch (err) {
      const e = ToolwireError.from(err);
      if (e.batch) throw e;
      // The stream's own error, with what had arrived.
      throw new ToolwireError(e.code, e.details, { cause: e, metadata: e.metadata, batch });
    }
    if (!batch.accepted) throw fail("the stream ended without BatchAccepted");
    const missing = [...planned].filter(([, p]) => !p.done).map(([id]) => id);
    if (missing.length > 0) throw fail(`the stream ended without results for calls ${listed(missing.sort())}`);
    if (!batch.finished) throw fail("the stream ended without BatchFinished");
    return batch as Batch;
  }

  /** Runs one call with CallTool, the unary fast path (no progress events,
   * no lane plan), and returns its result. A failing tool is a result
   * (isError, errorKind), not an exception; a failed RPC (a malformed call,
   * a wrong token, an unreachable server) rejects with a ToolwireError.
   * opts.timeoutMs is the RPC's deadline (default: none), callTimeoutMs the
   * call's own timeout. Aborting opts.signal cancels the call on the server.
   * A refusal that says when to retry (a rate limit's) is waited out and
   * the call sent again, up to rateLimitRetries times (see ClientOptions).
   * A response without a result, or with another call's, rejects with
   * INTERNAL. A server without CallTool (UNIMPLEMENTED: one from before it,
   * in a rolling upgrade) gets the call as a batch of one. */
  async callTool(name: string, args: CallInput["arguments"] = {}, opts: CallOptions & CallToolOptions = {}): Promise<CallResult> {
    const req = CallToolRequest.fromPartial({
      call: toCall({ callId: opts.callId ?? "call", name, arguments: args, idempotencyKey: opts.idempotencyKey, timeoutMs: opts.callTimeoutMs }),
      sessionId: opts.sessionId ?? "",
    });
    const deadline = opts.timeoutMs === undefined ? undefined : Date.now() + opts.timeoutMs;
    for (let attempt = 0; ; attempt++) {
      try {
        return await this.callToolOnce(name, req, deadline, opts.signal);
      } catch (err) {
        if (err instanceof ToolwireError && err.code === grpc.status.UNIMPLEMENTED) {
          // A server from before CallTool (which a balancer can pick in a
          // rolling upgrade) has ExecuteBatch only: the call goes as a
          // batch of one, which runs it alike.
          const timeoutMs = deadline === undefined ? undefined : Math.max(0, deadline - Date.now());
          const batch = await this.collect(this.executeBatch(ExecuteBatchRequest.fromPartial({ calls: [req.call!], sessionId: req.sessionId }), { signal: opts.signal, timeoutMs }));
          return batch.results[0];
        }
        if (!(err instanceof ToolwireError) || !(await this.waitToRetry(err, attempt, opts.signal, deadline))) throw err;
      }
    }
  }

  private callToolOnce(name: string, req: CallToolRequest, deadline: number | undefined, signal: AbortSignal | undefined): Promise<CallResult> {
    return new Promise((resolve, reject) => {
      const call = this.raw.callTool(req, new grpc.Metadata(), deadline === undefined ? {} : { deadline }, (err, res) => {
        if (err) reject(ToolwireError.from(err));
        else if (!res?.result) reject(new ToolwireError(grpc.status.INTERNAL, `CallTool for ${JSON.stringify(name)} returned no result`));
        // Another call's result would reach the model as this call's answer.
        else if (res.result.callId !== req.call?.callId) {
          reject(new ToolwireError(grpc.status.INTERNAL, `CallTool for call ${JSON.stringify(req.call?.callId)} returned the result of call ${JSON.stringify(res.result.callId)}`));
        } else resolve(res.result);
      });
      const stop = onAbort(signal, () => call.cancel());
      call.on("status", stop);
    });
  }

  /** Whether the attempt-th refusal err (counting from 0) is to be retried,
   * having waited the delay it gives: false when it is not a rate limit's,
   * the retries are spent, the retry would start past the deadline, or the
   * signal aborted first. */
  private waitToRetry(err: ToolwireError, attempt: number, signal: AbortSignal | undefined, deadline: number | undefined): Promise<boolean> {
    const delay = err.retryDelayMs;
    if (attempt >= this.rateLimitRetries || err.code !== grpc.status.RESOURCE_EXHAUSTED || delay === undefined || delay > MAX_RETRY_WAIT_MS || signal?.aborted) return Promise.resolve(false);
    if (deadline !== undefined && Date.now() + delay >= deadline) return Promise.resolve(false);
    this.onRateLimit?.(err, delay);
    return new Promise((resolve) => {
      let stop = () => {};
      const done = (retry: boolean) => {
        clearTimeout(timer);
        stop();
        resolve(retry);
      };
      const timer = setTimeout(() => done(true), delay);
      stop = onAbort(signal, () => done(false)); // at once if onRateLimit aborted it
    });
  }

  /** Yields the registry's revision now and at every change, until the
   * signal aborts or the loop breaks. */
  watchTools(opts: CallOptions = {}): AsyncIterable<WatchToolsResponse> {
    return stream(() => this.raw.watchTools(WatchToolsRequest.fromPartial({}), callOptions(opts)), opts.signal);
  }
}

/** An RPC to toolwire that failed: what the runtime must fix (a wrong or
 * missing token, an unreachable or overloaded server, shutdown, a malformed
 * batch), as opposed to a call that failed, which is a result for the model.
 * Every failed RPC of this package rejects with one, and the framework
 * adapters let it end the run. The message is one line:
 * "toolwire: UNAUTHENTICATED: invalid bearer token". */
export class ToolwireError extends Error {
  override name = "ToolwireError";
  /** The RPC's status code (status.UNAUTHENTICATED, status.UNAVAILABLE, …). */
  readonly code: grpc.status;
  /** What the server (or grpc-js, for a local failure) said, on one line. */
  readonly details: string;
  /** The trailers the failed RPC carried, when it got that far. */
  readonly metadata?: grpc.Metadata;
  /** When the refusal says when to retry (a google.rpc.RetryInfo among its
   * status details, as a server's rate limit sends with
   * RESOURCE_EXHAUSTED): the delay in milliseconds. */
  readonly retryDelayMs?: number;
  /** When collect rejected: what had arrived of the batch. */
  readonly batch?: PartialBatch;

  constructor(code: grpc.status, details: string, opts: { cause?: unknown; metadata?: grpc.Metadata; batch?: PartialBatch } = {}) {
    const line = details.replace(/\s*\n\s*/g, " ").trim();
    super(`toolwire: ${grpc.status[code] ?? code}: ${line}`, { cause: opts.cause });
    this.code = code;
    this.details = line;
    this.metadata = opts.metadata;
    this.retryDelayMs = retryDelayOf(opts.metadata);
    this.batch = opts.batch;
  }

  /** err as a ToolwireError: itself, or a grpc ServiceError wrapped (the
   * original is the cause); anything else is UNKNOWN. */
  static from(err: unknown): ToolwireError {
    if (err instanceof ToolwireError) return err;
    const e = err as Partial<grpc.ServiceError>;
    if (typeof e?.code === "number" && typeof e.details === "string") return new ToolwireError(e.code, e.details, { cause: err, metadata: e.metadata });
    return new ToolwireError(grpc.status.UNKNOWN, err instanceof Error ? err.message : String(err), { cause: err });
  }

  /** The ToolwireError in err or in its chain of causes (a framework's
   * wrapper: Agents JS's ToolCallError keeps it in .error), or undefined. */
  static find(err: unknown): ToolwireError | undefined {
    for (let e = err, depth = 0; e && typeof e === "object" && depth < 8; depth++) {
      if (e instanceof ToolwireError) return e;
      const next: unknown = (e as { cause?: unknown }).cause ?? (e as { error?: unknown }).error;
      if (next === e) break;
      e = next;
    }
    return undefined;
  }
}

/** How many times a client waits out a rate limit's refusal unless
 * ClientOptions.rateLimitRetries says otherwise. */
export const DEFAULT_RATE_LIMIT_RETRIES = 3;

/** The longest delay a refusal's RetryInfo may give for the client to wait
 * it out: a longer one (a server's say-so of days, past what setTimeout
 * can wait) rejects at once with the refusal, its delay in retryDelayMs. */
const MAX_RETRY_WAIT_MS = 60_000;

/** The delay in milliseconds that err's google.rpc.RetryInfo gives (a
 * ToolwireError's retryDelayMs, also found among err's causes, or a grpc-js
 * ServiceError's status details), or undefined when it has none. */
export function retryDelay(err: unknown): number | undefined {
  const e = ToolwireError.find(err);
  if (e) return e.retryDelayMs;
  const md = (err as Partial<grpc.ServiceError> | undefined)?.metadata;
  return md instanceof grpc.Metadata ? retryDelayOf(md) : undefined;
}

/** A call that failed (its result's isError: a tool's error, an unknown tool,
 * bad arguments, a timeout, …). The AI SDK and Agents JS adapters throw it
 * from a tool's execute so that the framework reports the call to the model
 * as failed; its message is the result's text, what the model reads. */
export class ToolResultError extends Error {
  override name = "ToolResultError";
  constructor(readonly result: CallResult) {
    super(resultText(result));
  }
}

/** What a tool message without an error flag (OpenAI tool messages, Agents
 * JS's function call outputs) starts with when the call failed, so that the
 * model can tell "Error: boom" (the call failed saying boom) from "boom" (the
 * call returned boom). */
export const ERROR_PREFIX = "Error: ";

/** A result's text for a tool message without an error flag: resultText,
 * after ERROR_PREFIX when the call failed. */
export function toolMessageText(r: CallResult): string {
  return r.isError ? ERROR_PREFIX + resultText(r) : resultText(r);
}

/** The text of a result: its text blocks, one per line, and a note for each
 * image (chat tool messages carry text only). It does not say whether the
 * call failed: see isError, and toolMessageText. */
export function resultText(r: CallResult): string {
  const parts: string[] = [];
  for (const block of r.content) {
    if (block.text) parts.push(block.text.text);
    else if (block.image) parts.push(`[image (${block.image.mimeType}, ${block.image.data.length} bytes) left out: tool messages carry text only]`);
  }
  return parts.join("\n");
}

/** A tool's input schema as an object, for a framework's declaration. */
export function inputSchema(t: Tool): Record<string, unknown> {
  return t.inputSchema ? JSON.parse(t.inputSchema) : { type: "object", properties: {} };
}

/** Converts a CallInput into the proto's ToolCall. */
export function toCall(c: CallInput): ToolCall {
  return ToolCall.fromPartial({
    callId: c.callId,
    name: c.name,
    arguments: typeof c.arguments === "string" ? c.arguments : JSON.stringify(c.arguments ?? {}),
    idempotencyKey: c.idempotencyKey ?? "",
    timeout: c.timeoutMs === undefined ? undefined : { seconds: Math.floor(c.timeoutMs / 1000), nanos: (c.timeoutMs % 1000) * 1e6 },
  });
}

function credentials(opts: ClientOptions): grpc.ChannelCredentials {
  if (opts.tls === true) return grpc.credentials.createSsl();
  if (opts.tls) return grpc.credentials.createSsl(opts.tls.rootCerts, opts.tls.privateKey, opts.tls.certChain);
  if (opts.token && !opts.insecureToken) throw new Error("toolwire: a token needs TLS; set insecureToken to send it over plaintext");
  return grpc.credentials.createInsecure();
}

/** The channel options with an interceptor that adds the bearer token: grpc-js
 * sends call credentials over TLS only, and toolwire's insecureToken is an
 * explicit choice to send it over plaintext too. */
function channelOptions(opts: ClientOptions): grpc.ClientOptions {
  // A listing's page stays within the server's max_message_bytes (4 MiB by
  // default, grpc-js's own limit), but one holding a very large
  // declaration, or an old server's whole listing, may be as large as a
  // server sends in one (its max_list_bytes, 64 MiB by default).
  const base = { "grpc.max_receive_message_length": LIST_RECEIVE_BYTES, ...KEEPALIVE, ...opts.channelOptions };
  if (!opts.token) return base;
  const header = `Bearer ${opts.token}`;
  const withToken: grpc.Interceptor = (options, next) =>
    new grpc.InterceptingCall(next(options), {
      start(metadata, listener, start) {
        metadata.set("authorization", header);
        start(metadata, listener);
      },
    });
  return { ...base, interceptors: [...(opts.channelOptions?.interceptors ?? []), withToken] };
}

function callOptions(opts: CallOptions): grpc.CallOptions {
  return opts.timeoutMs === undefined ? {} : { deadline: Date.now() + opts.timeoutMs };
}

/** The tools listTools asks for per page unless told otherwise: the most a
 * server's page holds. */
const DEFAULT_PAGE_SIZE = 1000;
/** How many times listTools starts over when the tools change between its
 * pages. */
const LIST_RESTARTS = 3;
/** What one listing reads at most unless listTools is told otherwise: the
 * most a server lists in one response (its max_list_bytes default), and
 * pages enough for ten million tools at the default page size. */
const DEFAULT_LIST_BYTES = 64 << 20;
const DEFAULT_LIST_PAGES = 10_000;
/** The largest message the client receives unless channelOptions says
 * otherwise ("grpc.max_receive_message_length"). */
const LIST_RECEIVE_BYTES = 64 << 20;

/** The keepalive a client's channel has unless channelOptions says
 * otherwise: while an RPC is open, a ping after 30 s without one, and the
 * connection dropped when no answer comes within 10 s, so that a stream on
 * a dead connection (a frozen server, a path that black-holes packets) ends
 * as UNAVAILABLE, and reattach can resume it, instead of waiting for the
 * RPC's deadline, or forever. 30 s is above a toolwire server's
 * keepalive_min_time (10 s by default), which answers pings sent more often
 * with GOAWAY too_many_pings; an idle connection is not pinged. */
const KEEPALIVE = {
  "grpc.keepalive_time_ms": 30_000,
  "grpc.keepalive_timeout_ms": 10_000,
  "grpc.keepalive_permit_without_calls": 0,
};

/** The status codes of a stream that dropped rather than failed. */
const DROPPED = new Set<grpc.status>([grpc.status.UNAVAILABLE, grpc.status.INTERNAL, grpc.status.UNKNOWN, grpc.status.ABORTED]);

/** Calls f when signal aborts; returns what stops listening (a run-long
 * signal must not collect a listener per RPC). */
export function onAbort(signal: AbortSignal | undefined, f: () => void): () => void {
  if (!signal) return () => {};
  if (signal.aborted) {
    f();
    return () => {};
  }
  signal.addEventListener("abort", f, { once: true });
  return () => signal.removeEventListener("abort", f);
}

/** Waits ms, or rejects with CANCELLED as soon as signal aborts. */
function pause(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve, reject) => {
    let stop = () => {};
    const timer = setTimeout(() => (stop(), resolve()), ms);
    stop = onAbort(signal, () => {
      clearTimeout(timer);
      reject(new ToolwireError(grpc.status.CANCELLED, "the signal aborted while waiting to re-attach", { cause: signal?.reason }));
    });
  });
}

/** The cause of the error an event out of order throws, which no
 * re-attach mends. */
const OUT_OF_ORDER = new Error("events out of order");

/** How many call IDs an error names: a plan is the server's, and one of
 * a million calls would make a message of megabytes. */
const MAX_LISTED = 20;

/** ids as JSON, the first MAX_LISTED of them and how many more. */
function listed(ids: string[]): string {
  return ids.length <= MAX_LISTED ? JSON.stringify(ids) : `${JSON.stringify(ids.slice(0, MAX_LISTED))} and ${ids.length - MAX_LISTED} more`;
}

/** Whether ev is BatchFinished, a batch's last event. */
const isFinished = (ev: ExecuteBatchResponse) => ev.finished !== undefined;

/** How long a stream may stay open after its last event (BatchFinished)
 * before the client cancels it. */
const FINISH_GRACE_MS = 1000;

/** Adapts a grpc-js server stream to an async iterable that starts the RPC
 * when iteration starts (an iterable never read opens nothing) and cancels
 * it when the consumer stops early or the signal aborts. An error before
 * any event that retry resolves true for ends the iteration quietly (the
 * caller starts the RPC again). An event isLast says is the stream's last
 * ends it: the stream's status, which a server keeping the contract sends
 * at once, is waited for FINISH_GRACE_MS at most, then the RPC is
 * cancelled, so a server that holds the stream open holds nothing. */
async function* stream<T>(
  start: () => grpc.ClientReadableStream<T>,
  signal?: AbortSignal,
  retry?: (err: ToolwireError) => Promise<boolean>,
  isLast?: (ev: T) => boolean,
): AsyncGenerator<T> {
  const call = start();
  const ended = new Promise<void>((resolve) => call.on("status", () => resolve()));
  const stop = onAbort(signal, () => call.cancel());
  let first = true;
  try {
    for await (const ev of call) {
      first = false;
      yield ev as T;
      if (isLast?.(ev as T)) {
        let timer: NodeJS.Timeout | undefined;
        await Promise.race([ended, new Promise<void>((resolve) => (timer = setTimeout(resolve, FINISH_GRACE_MS)))]);
        clearTimeout(timer);
        return;
      }
    }
  } catch (err) {
    const e = ToolwireError.from(err);
    // Refused before BatchAccepted: nothing ran.
    if (first && retry && (await retry(e))) return;
    throw e;
  } finally {
    stop();
    call.cancel(); // a no-op once the stream has ended
  }
}
