// @toolwire/client: toolwire's TypeScript client. The framework adapters live
// in their own entry points (@toolwire/client/ai, /openai-agents,
// /langchain) so that each framework is needed only by those who use it.

export { ToolwireClient, ToolwireError, ToolResultError, ERROR_PREFIX, DEFAULT_RATE_LIMIT_RETRIES, retryDelay, resultText, toolMessageText, inputSchema, toCall } from "./client.js";
export type { Batch, PartialBatch, CallInput, CallOptions, CallToolOptions, ClientOptions, ListOptions } from "./client.js";
export { StepBatcher } from "./batcher.js";
export type { BatcherOptions, ExecuteOptions } from "./batcher.js";
export * from "./gen/toolwire/v1/toolwire.js";
// For the codes of the ToolwireErrors that failed RPCs throw.
export { status, type ServiceError } from "@grpc/grpc-js";
