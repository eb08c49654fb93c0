// The step batcher. Agent frameworks call each tool's execute separately but
// at the same moment (Promise.all over a model step's tool calls); one RPC per
// call would throw away toolwire's lanes. The batcher gathers the calls that
// arrive within a short window into one ExecuteBatch and hands each caller
// its own result.

import { randomUUID } from "node:crypto";
import type { BatchAccepted, CallProgress, CallResult, ExecuteBatchResponse } from "./gen/toolwire/v1/toolwire.js";
import { status } from "@grpc/grpc-js";
import { CallInput, onAbort, ToolwireClient, ToolwireError } from "./client.js";

export interface BatcherOptions {
  /** How long the first call of a step waits for the others, in ms. 0 means
   * the calls made in the same tick of the event loop. Default: 2. */
  windowMs?: number;
  /** Most calls in one batch; a fuller step is split. Default: 256. */
  maxCalls?: number;
  /** Sent with every batch (toolwire's session: workspace, variables). */
  sessionId?: string;
  /** Called with each batch's BatchAccepted: its ID and lane plan. */
  onBatch?: (accepted: BatchAccepted, callIds: string[]) => void;
  /** false sends every call as a batch of its own (the naive glue), for
   * comparison. Default: true. */
  enabled?: boolean;
}

export interface ExecuteOptions {
  /** Aborting ends this call's wait; once every call of its batch has been
   * aborted, the batch's RPC is cancelled and the server cancels the tools. */
  signal?: AbortSignal;
  /** Progress events of this call (progress/total/message, output chunks). */
  onProgress?: (p: CallProgress) => void;
}

interface Pending {
  call: CallInput;
  opts: ExecuteOptions;
  resolve: (r: CallResult) => void;
  reject: (err: unknown) => void;
  settled: boolean;
  /** Set once the call is in a running batch: cancels the RPC when every
   * call of the batch has been aborted. */
  cancelBatch?: () => void;
  stopListening?: () => void;
}

/** Gathers concurrent execute calls into ExecuteBatch RPCs. */
export class StepBatcher {
  private pending: Pending[] = [];
  private timer?: NodeJS.Timeout | NodeJS.Immediate;
  private readonly windowMs: number;
  private readonly maxCalls: number;

  constructor(
    readonly client: ToolwireClient,
    private readonly opts: BatcherOptions = {},
  ) {
    this.windowMs = opts.windowMs ?? 2;
    this.maxCalls = opts.maxCalls ?? 256;
  }

  /** Runs one call as part of the current step's batch and resolves with
   * its result. Failed calls resolve too (is_error with text for the model);
   * the promise rejects only with a ToolwireError when the RPC fails (auth,
   * an unreachable server, overload, shutdown), or when the signal aborts. */
  execute(call: CallInput, opts: ExecuteOptions = {}): Promise<CallResult> {
    if (opts.signal?.aborted) return Promise.reject(abortError(opts.signal));
    const c = { ...call, callId: call.callId || randomUUID() };
    return new Promise((resolve, reject) => {
      // Call IDs must be unique within a batch: a repeated one starts the next.
      if (this.pending.some((p) => p.call.callId === c.callId)) this.flush();
      const p: Pending = { call: c, opts, resolve, reject, settled: false };
      // Listening from the start: a call aborted while it waits for the
      // window is never sent.
      p.stopListening = onAbort(opts.signal, () => {
        settle(p, () => p.reject(abortError(opts.signal!)));
        p.cancelBatch?.();
      });
      this.pending.push(p);
      if (this.opts.enabled === false || this.pending.length >= this.maxCalls) this.flush();
      else if (!this.timer) this.timer = this.windowMs > 0 ? setTimeout(() => this.flush(), this.windowMs) : setImmediate(() => this.flush());
    });
  }

  /** execute as an async generator: yields the call's progress events as
   * they come and returns its result, for frameworks whose tools stream
   * (the AI SDK's preliminary results). */
  async *executeStream(call: CallInput, opts: ExecuteOptions = {}): AsyncGenerator<CallProgress, CallResult> {
    const queue: CallProgress[] = [];
    let wake: (() => void) | undefined;
    let finished = false;
    const done = this.execute(call, {
      ...opts,
      onProgress: (p) => {
        opts.onProgress?.(p);
        queue.push(p);
        wake?.();
      },
    });
    const end = () => {
      finished = true;
      wake?.();
    };
    done.then(end, end);
    for (;;) {
      while (queue.length > 0) yield queue.shift()!;
      if (finished) return await done;
      await new Promise<void>((r) => (wake = r));
      wake = undefined;
    }
  }

  /** Sends the gathered calls now. */
  flush(): void {
    if (this.timer) {
      clearTimeout(this.timer as NodeJS.Timeout);
      clearImmediate(this.timer as NodeJS.Immediate);
      this.timer = undefined;
    }
    const batch = this.pending.filter((p) => !p.settled);
    this.pending = [];
    if (batch.length > 0) void this.run(batch);
  }

  private async run(batch: Pending[]): Promise<void> {
    const rpc = new AbortController();
    const byId = new Map(batch.map((p) => [p.call.callId, p]));
    const cancelIfAllAborted = () => {
      if (batch.every((q) => q.settled)) rpc.abort();
    };
    for (const p of batch) p.cancelBatch = cancelIfAllAborted;
    try {
      const events: AsyncIterable<ExecuteBatchResponse> = this.client.executeBatch(
        batch.map((p) => p.call),
        { signal: rpc.signal, sessionId: this.opts.sessionId },
      );
      for await (const ev of events) {
        if (ev.accepted) this.opts.onBatch?.(ev.accepted, batch.map((p) => p.call.callId));
        else if (ev.progress) byId.get(ev.progress.callId)?.opts.onProgress?.(ev.progress);
        else if (ev.result) {
          const p = byId.get(ev.result.callId);
          if (p) settle(p, () => p.resolve(ev.result!));
        }
      }
      const missing = new ToolwireError(status.INTERNAL, "the batch ended without this call's result");
      for (const p of batch) settle(p, () => p.reject(missing));
    } catch (err) {
      const e = ToolwireError.from(err);
      for (const p of batch) settle(p, () => p.reject(e));
    }
  }
}

function settle(p: Pending, f: () => void): void {
  if (p.settled) return;
  p.settled = true;
  p.stopListening?.();
  f();
}

function abortError(signal: AbortSignal): unknown {
  return signal.reason ?? new DOMException("The operation was aborted.", "AbortError");
}
