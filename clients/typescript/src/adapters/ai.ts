// Vercel AI SDK adapter: toolwire's tools as an AI SDK ToolSet. The SDK runs
// a step's tool calls at once; the StepBatcher turns them into one batch.
//
// How errors travel (ai 6's generateText and streamText): the SDK catches
// whatever a tool's execute throws and shows it to the model as an
// error-text tool result, then asks the model again; no error thrown by
// execute ends the run. So a failed call throws ToolResultError (the model
// reads its text as error-text), while a ToolwireError, which the model
// cannot fix, is returned as the tool's output and thrown by toModelOutput,
// which the SDK calls, outside any catch, when it turns the step's results
// into the next prompt: generateText rejects with it (streamText's stream
// errors with it) before the model is asked again.

import { jsonSchema, tool, type ToolSet } from "ai";
import type { CallProgress, CallResult, Tool } from "../gen/toolwire/v1/toolwire.js";
import { inputSchema, resultText, ToolResultError, ToolwireError } from "../client.js";
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
 * `tools`. A call's output is its result's text. A failed call (unknown tool,
 * bad arguments, a tool's error, timeout) throws ToolResultError: the step
 * records a tool-error and the model reads the text as an error
 * ({type: "error-text"}). A failed RPC (wrong token, server down, overload,
 * shutdown) ends the run: generateText rejects with the ToolwireError, and
 * the model is not asked again. The SDK's abortSignal cancels the step's
 * running calls. */
export function aiTools(batcher: StepBatcher, tools: Tool[], opts: AIToolsOptions = {}): ToolSet {
  const set: ToolSet = {};
  for (const t of tools) {
    set[t.name] = tool({
      title: t.title || undefined,
      description: t.description,
      inputSchema: jsonSchema<unknown>(inputSchema(t) as Parameters<typeof jsonSchema>[0]),
      execute: opts.preliminaryProgress
        ? async function* (input: unknown, { toolCallId, abortSignal }): AsyncGenerator<string | ToolwireError> {
            const stream = batcher.executeStream({ callId: toolCallId, name: t.name, arguments: input }, { signal: abortSignal, onProgress: opts.onProgress });
            for (;;) {
              let next: IteratorResult<CallProgress, CallResult>;
              try {
                next = await stream.next();
              } catch (err) {
                yield runEnding(err); // the last value is the output
                return;
              }
              if (next.done) {
                yield output(next.value);
                return;
              }
              yield progressText(next.value);
            }
          }
        : async (input: unknown, { toolCallId, abortSignal }): Promise<string | ToolwireError> => {
            let r: CallResult;
            try {
              r = await batcher.execute({ callId: toolCallId, name: t.name, arguments: input }, { signal: abortSignal, onProgress: opts.onProgress });
            } catch (err) {
              return runEnding(err);
            }
            return output(r);
          },
      toModelOutput: ({ output }) => {
        if (output instanceof ToolwireError) throw output;
        // The SDK's own default for anything else (a history whose outputs
        // went through JSON).
        return typeof output === "string" ? { type: "text", value: output } : { type: "json", value: (output ?? null) as never };
      },
    });
  }
  return set;
}

/** A result as the tool's output, or ToolResultError for a failed call. */
function output(r: CallResult): string {
  if (r.isError) throw new ToolResultError(r);
  return resultText(r);
}

/** A ToolwireError becomes the output that toModelOutput throws; anything
 * else (the SDK's abort) is thrown on, as the SDK expects. */
function runEnding(err: unknown): ToolwireError {
  if (err instanceof ToolwireError) return err;
  throw err;
}
