// LangChain.js adapter: toolwire's tools as DynamicStructuredTools with their
// JSON Schema. Invoke a message's tool_calls with Promise.all and the
// StepBatcher turns them into one batch.

import { DynamicStructuredTool, type ToolRunnableConfig } from "@langchain/core/tools";
import type { CallProgress, Tool } from "../gen/toolwire/v1/toolwire.js";
import { inputSchema, resultText } from "../client.js";
import type { StepBatcher } from "../batcher.js";

export interface LangChainToolsOptions {
  /** Progress of every call, with the model's call ID. */
  onProgress?: (p: CallProgress) => void;
}

/** Makes a LangChain tool of each toolwire tool, for `model.bindTools` and
 * for invoking the model's tool calls (`tool.invoke(toolCall)` gives a
 * ToolMessage). A failed call's ToolMessage carries its text, it does not
 * throw; the config's signal cancels the step's running calls. */
export function langchainTools(batcher: StepBatcher, tools: Tool[], opts: LangChainToolsOptions = {}): DynamicStructuredTool[] {
  return tools.map(
    (t) =>
      new DynamicStructuredTool({
        name: t.name,
        description: t.description,
        schema: inputSchema(t),
        func: async (input: unknown, _runManager, config) =>
          resultText(
            await batcher.execute(
              { callId: (config as ToolRunnableConfig | undefined)?.toolCall?.id ?? "", name: t.name, arguments: input },
              { signal: config?.signal, onProgress: opts.onProgress },
            ),
          ),
      }),
  );
}
