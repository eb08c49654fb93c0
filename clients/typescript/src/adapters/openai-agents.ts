// OpenAI Agents JS adapter: toolwire's tools as function tools with their
// JSON Schema parameters. The runner executes a turn's tool calls together;
// the StepBatcher turns them into one batch.

import { tool, type FunctionTool } from "@openai/agents";
import type { CallProgress, Tool } from "../gen/toolwire/v1/toolwire.js";
import { inputSchema, resultText } from "../client.js";
import type { StepBatcher } from "../batcher.js";

export interface AgentsToolsOptions {
  /** Progress of every call, with the model's call ID. */
  onProgress?: (p: CallProgress) => void;
}

/** Makes an Agents JS function tool of each toolwire tool, for
 * `new Agent({tools})`. Parameters are toolwire's JSON Schema, non-strict
 * (toolwire validates the arguments and tells the model what is wrong).
 * A failed call returns its text for the model, it does not throw. */
export function agentsTools(batcher: StepBatcher, tools: Tool[], opts: AgentsToolsOptions = {}): FunctionTool[] {
  return tools.map((t) =>
    tool({
      name: t.name,
      description: t.description,
      // toolwire's schemas are JSON Schema objects; the SDK's type wants the
      // non-strict shape spelled out, which any object schema satisfies at run time.
      parameters: inputSchema(t) as unknown as { type: "object"; properties: Record<string, Record<string, unknown>>; required: string[]; additionalProperties: true },
      strict: false,
      execute: async (input: unknown, _ctx, details) =>
        resultText(
          await batcher.execute(
            { callId: details?.toolCall?.callId ?? "", name: t.name, arguments: input },
            { signal: details?.signal, onProgress: opts.onProgress },
          ),
        ),
    }) as unknown as FunctionTool,
  );
}
