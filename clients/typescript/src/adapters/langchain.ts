// LangChain.js adapter: toolwire's tools as DynamicStructuredTools with their
// JSON Schema. Invoke a message's tool_calls with Promise.all and the
// StepBatcher turns them into one batch.
//
// How errors travel: LangChain rethrows what a tool's function throws, so a
// ToolwireError rejects tool.invoke, the step's Promise.all and the run. A
// failed call is a ToolMessage with status "error", LangChain's flag for a
// failed tool call (the provider integrations that have an error field fill
// it from that).

import { dispatchCustomEvent } from "@langchain/core/callbacks/dispatch";
import { ToolMessage } from "@langchain/core/messages";
import { DynamicStructuredTool, ToolInputParsingException, type DynamicStructuredToolInput, type ToolRunnableConfig } from "@langchain/core/tools";
import type { CallProgress, CallResult, Tool } from "../gen/toolwire/v1/toolwire.js";
import { inputSchema, resultText, toolMessageText } from "../client.js";
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
 * ToolMessage). A failed call (unknown tool, bad arguments, a tool's error,
 * timeout) does not throw: its ToolMessage has status "error" and its text
 * (invoked without a tool call, it returns "Error: " and the text). A failed
 * RPC (wrong token, server down, overload, shutdown) rejects with a
 * ToolwireError. The config's signal cancels the step's running calls;
 * progress is dispatched as PROGRESS_EVENT custom events. */
export function langchainTools(batcher: StepBatcher, tools: Tool[], opts: LangChainToolsOptions = {}): DynamicStructuredTool[] {
  return tools.map(
    (t) =>
      new ToolwireTool(batcher, {
        name: t.name,
        description: t.description,
        schema: inputSchema(t),
        func: async (input: unknown, runManager, config) => {
          const toolCallId = (config as ToolRunnableConfig | undefined)?.toolCall?.id;
          const r = await batcher.execute(
            { callId: toolCallId ?? "", name: t.name, arguments: input },
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
          );
          return toolOutput(r, t.name, toolCallId);
        },
      }),
  );
}

/** What a tool returns for a result: a ToolMessage with its status for a
 * tool call (LangChain hands a returned ToolMessage on as it is), else the
 * text, flagged with ERROR_PREFIX when the call failed. */
function toolOutput(r: CallResult, name: string, toolCallId: string | undefined): ToolMessage | string {
  if (!toolCallId) return toolMessageText(r);
  return new ToolMessage({ content: resultText(r), tool_call_id: toolCallId, name, status: r.isError ? "error" : "success" });
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
      const r = await this.batcher.execute({ callId: toolCall?.id ?? "", name: this.name, arguments: input }, { signal: config?.signal });
      return toolOutput(r, this.name, toolCall?.id);
    }
  }
}

function isToolCall(x: unknown): x is { id?: string; args: unknown } {
  return typeof x === "object" && x !== null && (x as { type?: unknown }).type === "tool_call";
}
