// OpenAI Agents JS adapter: toolwire's tools as function tools with their
// JSON Schema parameters. The runner executes a turn's tool calls together;
// the StepBatcher turns them into one batch.
//
// How errors travel: what a tool's execute throws goes to its errorFunction,
// whose string the model reads as the call's output; when errorFunction
// throws, the run rejects (with the SDK's ToolCallError, whose .error is what
// was thrown). A failed call throws ToolResultError, which errorFunction
// turns into ERROR_PREFIX and the result's text (function call outputs have
// no error flag); a ToolwireError it throws on, ending the run.

import { tool, type FunctionTool } from "@openai/agents";
import type { CallProgress, Tool } from "../gen/toolwire/v1/toolwire.js";
import { ERROR_PREFIX, inputSchema, resultText, ToolResultError, ToolwireError } from "../client.js";
import type { StepBatcher } from "../batcher.js";

export interface AgentsToolsOptions {
  /** Progress of every call, with the model's call ID. */
  onProgress?: (p: CallProgress) => void;
}

/** Makes an Agents JS function tool of each toolwire tool, for
 * `new Agent({tools})`. Parameters are toolwire's JSON Schema, non-strict
 * (toolwire validates the arguments and tells the model what is wrong).
 * A failed call's output is "Error: " and its text, for the model. A failed
 * RPC (wrong token, server down, overload, shutdown) ends the run: run()
 * rejects with the SDK's ToolCallError whose .error is the ToolwireError
 * (ToolwireError.find(err) finds it). */
export function agentsTools(batcher: StepBatcher, tools: Tool[], opts: AgentsToolsOptions = {}): FunctionTool[] {
  return tools.map((t) =>
    tool({
      name: t.name,
      description: t.description,
      // toolwire's schemas are JSON Schema objects; the SDK's type wants the
      // non-strict shape spelled out, which any object schema satisfies at run time.
      parameters: inputSchema(t) as unknown as { type: "object"; properties: Record<string, Record<string, unknown>>; required: string[]; additionalProperties: true },
      strict: false,
      execute: async (input: unknown, _ctx, details) => {
        const r = await batcher.execute(
          { callId: details?.toolCall?.callId ?? "", name: t.name, arguments: input },
          { signal: details?.signal, onProgress: opts.onProgress },
        );
        if (r.isError) throw new ToolResultError(r);
        return resultText(r);
      },
      errorFunction: (_ctx, error) => {
        if (error instanceof ToolwireError) throw error;
        // A failed call, or what the SDK threw before execute (arguments that
        // are not JSON): the model reads it and can try again.
        return ERROR_PREFIX + (error instanceof Error ? error.message : String(error));
      },
    }) as unknown as FunctionTool,
  );
}
