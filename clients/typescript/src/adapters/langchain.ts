// LangChain.js adapter: toolwire's tools as DynamicStructuredTools with their
// JSON Schema. Invoke a message's tool_calls with Promise.all and the
// StepBatcher turns them into one batch.

import { dispatchCustomEvent } from "@langchain/core/callbacks/dispatch";
import { ToolMessage } from "@langchain/core/messages";
import { DynamicStructuredTool, ToolInputParsingException, type DynamicStructuredToolInput, type ToolRunnableConfig } from "@langchain/core/tools";
import type { CallProgress, Tool } from "../gen/toolwire/v1/toolwire.js";
import { inputSchema, resultText } from "../client.js";
import type { StepBatcher } from "../batcher.js";

export interface LangChainToolsOptions {
  /** Progress of every call, with the model's call ID. */
  onProgress?: (p: CallProgress) => void;
}

/** The custom event each progress event is dispatched as, to the callbacks
 * of the tool's run (streamEvents' on_custom_event, handleCustomEvent). */
export const PROGRESS_EVENT = "toolwire_progress";

/** Makes a LangChain tool of each toolwire tool, for `model.bindTools` and
 * for invoking the model's tool calls (`tool.invoke(toolCall)` gives a
 * ToolMessage). A failed call's ToolMessage carries its text, it does not
 * throw; the config's signal cancels the step's running calls; progress is
 * dispatched as PROGRESS_EVENT custom events. */
export function langchainTools(batcher: StepBatcher, tools: Tool[], opts: LangChainToolsOptions = {}): DynamicStructuredTool[] {
  return tools.map(
    (t) =>
      new ToolwireTool(batcher, {
        name: t.name,
        description: t.description,
        schema: inputSchema(t),
        func: async (input: unknown, runManager, config) =>
          resultText(
            await batcher.execute(
              { callId: (config as ToolRunnableConfig | undefined)?.toolCall?.id ?? "", name: t.name, arguments: input },
              {
                signal: config?.signal,
                onProgress: (p) => {
                  opts.onProgress?.(p);
                  // The tool run's child callbacks: config holds the caller's
                  // callbacks, not the run's. Without callbacks there is
                  // nobody to tell.
                  if (runManager) dispatchCustomEvent(PROGRESS_EVENT, p, { ...config, callbacks: runManager.getChild() }).catch(() => {});
                },
              },
            ),
          ),
      }),
  );
}

/** A DynamicStructuredTool whose arguments, when they do not match the
 * schema, still go to toolwire. LangChain checks them first and throws
 * ToolInputParsingException, which would reject the step's Promise.all and
 * end the run; toolwire checks them too and answers with a result that says
 * what is wrong ("missing property 'message'"), which the model can act on. */
class ToolwireTool extends DynamicStructuredTool {
  constructor(
    private readonly batcher: StepBatcher,
    fields: DynamicStructuredToolInput & { name: string },
  ) {
    super(fields);
  }

  // The signature is call's, loosened: its overloads are generic over the
  // schema, and this override only passes through what it is given.
  override async call(arg: any, configArg?: any, tags?: string[]): Promise<any> {
    try {
      return await super.call(arg, configArg, tags);
    } catch (e) {
      if (!(e instanceof ToolInputParsingException)) throw e;
      const config = configArg as ToolRunnableConfig | undefined;
      const toolCall = isToolCall(arg) ? arg : config?.toolCall;
      const input = isToolCall(arg) ? arg.args : arg;
      const callId = toolCall?.id ?? "";
      const text = resultText(await this.batcher.execute({ callId, name: this.name, arguments: input }, { signal: config?.signal }));
      // What LangChain's call returns: a ToolMessage for a tool call, else the text.
      return toolCall?.id ? new ToolMessage({ content: text, tool_call_id: toolCall.id, name: this.name }) : text;
    }
  }
}

function isToolCall(x: unknown): x is { id?: string; args: unknown } {
  return typeof x === "object" && x !== null && (x as { type?: unknown }).type === "tool_call";
}
