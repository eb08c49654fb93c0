// Vercel AI SDK adapter: toolwire's tools as an AI SDK ToolSet. The SDK runs
// a step's tool calls at once; the StepBatcher turns them into one batch.

import { jsonSchema, tool, type ToolSet } from "ai";
import type { CallProgress, Tool } from "../gen/toolwire/v1/toolwire.js";
import { inputSchema, resultText } from "../client.js";
import type { StepBatcher } from "../batcher.js";

export interface AIToolsOptions {
  /** Progress of every call, with the model's call ID. */
  onProgress?: (p: CallProgress) => void;
  /** Stream each call's progress messages as the SDK's preliminary tool
   * results (streamText's tool-result parts with preliminary: true, for a
   * UI); the model still sees only the final result. Default: false. */
  preliminaryProgress?: boolean;
}

/** A progress event as a line of text: its message, or progress/total. */
export function progressText(p: CallProgress): string {
  const text = p.message || (p.progress === undefined ? "" : p.total === undefined ? `${p.progress}` : `${p.progress}/${p.total}`);
  return p.output ? [text, p.output].filter(Boolean).join("\n") : text;
}

/** Makes an AI SDK tool of each toolwire tool, for generateText/streamText's
 * `tools`. A failed call (unknown tool, bad arguments, a tool's error,
 * timeout) returns its text for the model, it does not throw; the SDK's
 * abortSignal cancels the step's running calls. */
export function aiTools(batcher: StepBatcher, tools: Tool[], opts: AIToolsOptions = {}): ToolSet {
  const set: ToolSet = {};
  for (const t of tools) {
    set[t.name] = tool({
      title: t.title || undefined,
      description: t.description,
      inputSchema: jsonSchema<unknown>(inputSchema(t) as Parameters<typeof jsonSchema>[0]),
      execute: opts.preliminaryProgress
        ? async function* (input: unknown, { toolCallId, abortSignal }): AsyncGenerator<string> {
            const stream = batcher.executeStream({ callId: toolCallId, name: t.name, arguments: input }, { signal: abortSignal, onProgress: opts.onProgress });
            for (;;) {
              const next = await stream.next();
              if (next.done) {
                yield resultText(next.value); // the last value is the result
                return;
              }
              yield progressText(next.value);
            }
          }
        : async (input: unknown, { toolCallId, abortSignal }) =>
            resultText(await batcher.execute({ callId: toolCallId, name: t.name, arguments: input }, { signal: abortSignal, onProgress: opts.onProgress })),
    });
  }
  return set;
}
