// The AI SDK adapter, driven by the SDK's own MockLanguageModelV3 through
// generateText against a real toolwire server.

import { after, before, describe, test } from "node:test";
import * as assert from "node:assert/strict";
import { generateText, simulateReadableStream, stepCountIs, streamText } from "ai";
import { MockLanguageModelV3 } from "ai/test";
import type { LanguageModelV3CallOptions, LanguageModelV3GenerateResult } from "@ai-sdk/provider";
import { BatchAccepted, StepBatcher, Tool, ToolResultError, ToolwireClient } from "@toolwire/client";
import { aiTools } from "@toolwire/client/ai";
import {
  addr,
  assertOneBatch,
  assertRunEnding,
  assertStepResults,
  BOOM_SEEN,
  BOOM_STEP,
  FAILING_SERVERS,
  FINAL,
  serverOutcome,
  type Seen,
  skip,
  skipOwnServer,
  STALE_TOOL,
  STEP,
  UNKNOWN_TEXT,
} from "./fixture.js";

const usage = {
  inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 },
  outputTokens: { total: 1, text: 1, reasoning: 0 },
};

function toolCalls(calls: { id: string; name: string; args: unknown }[]): LanguageModelV3GenerateResult {
  return {
    content: calls.map((c) => ({ type: "tool-call", toolCallId: c.id, toolName: c.name, input: JSON.stringify(c.args) })),
    finishReason: { unified: "tool-calls", raw: "tool_calls" },
    usage,
    warnings: [],
  };
}

function answer(text: string): LanguageModelV3GenerateResult {
  return { content: [{ type: "text", text }], finishReason: { unified: "stop", raw: "stop" }, usage, warnings: [] };
}

/** The tool results the model was shown in its prompt, in order, as the
 * SDK's tool-result outputs ({type: "text" | "error-text" | …, value}). */
function toolOutputs(call: LanguageModelV3CallOptions): { id: string; output: unknown }[] {
  return call.prompt.flatMap((m) => (m.role === "tool" ? m.content.flatMap((p) => (p.type === "tool-result" ? [{ id: p.toolCallId, output: p.output }] : [])) : []));
}

/** The same, as text flagged as failed when the output is error-text. */
function toolResults(call: LanguageModelV3CallOptions): Seen[] {
  return toolOutputs(call).map(({ id, output }) => {
    const o = output as { type: string; value: unknown };
    const text = o.type === "text" || o.type === "error-text" ? String(o.value) : JSON.stringify(o);
    return { id, text, error: o.type.startsWith("error-") };
  });
}

describe("AI SDK adapter", { skip }, () => {
  let client: ToolwireClient;
  let listed: Tool[];
  before(async () => {
    client = new ToolwireClient(addr);
    listed = (await client.listTools()).tools;
  });
  after(() => client?.close());

  test("a step's calls run as one batch and the final answer sees every result", async () => {
    const batches: BatchAccepted[] = [];
    const batcher = new StepBatcher(client, { onBatch: (a) => batches.push(a) });
    const model = new MockLanguageModelV3({ doGenerate: [toolCalls(STEP), answer(FINAL)] });
    const result = await generateText({ model, tools: aiTools(batcher, listed), prompt: "go", stopWhen: stepCountIs(2) });

    assertOneBatch(batches);
    assert.equal(result.text, FINAL);
    assertStepResults(toolResults(model.doGenerateCalls[1]));
  });

  test("an unknown tool's error reaches the model as text", async () => {
    const batcher = new StepBatcher(client);
    const model = new MockLanguageModelV3({
      doGenerate: [toolCalls([{ id: "ghost", name: "search_web", args: { q: "x" } }]), answer("ok")],
    });
    const result = await generateText({ model, tools: aiTools(batcher, [...listed, STALE_TOOL]), prompt: "go", stopWhen: stepCountIs(2) });
    assert.equal(result.text, "ok");
    const [r] = toolResults(model.doGenerateCalls[1]);
    assert.ok(r.text.startsWith(UNKNOWN_TEXT), r.text);
    assert.equal(r.error, true);
  });

  test("a name the model was not given reaches it as the SDK's own error-text; toolwire never sees it", async () => {
    const batches: BatchAccepted[] = [];
    const model = new MockLanguageModelV3({ doGenerate: [toolCalls([{ id: "ghost", name: "made_up", args: {} }]), answer("ok")] });
    const result = await generateText({ model, tools: aiTools(new StepBatcher(client, { onBatch: (a) => batches.push(a) }), listed), prompt: "go", stopWhen: stepCountIs(2) });
    assert.equal(result.text, "ok");
    const [r] = toolResults(model.doGenerateCalls[1]);
    assert.equal(r.error, true);
    assert.match(r.text, /unavailable tool 'made_up'/);
    assert.equal(batches.length, 0);
  });

  test("a failed call reaches the model as error-text, not as the text an echo of it would be", async () => {
    const model = new MockLanguageModelV3({ doGenerate: [toolCalls(BOOM_STEP), answer("ok")] });
    const result = await generateText({ model, tools: aiTools(new StepBatcher(client), listed), prompt: "go", stopWhen: stepCountIs(2) });
    assert.equal(result.text, "ok");
    assert.deepEqual(toolOutputs(model.doGenerateCalls[1]), [
      { id: "failed", output: { type: "error-text", value: "boom" } },
      { id: "echoed", output: { type: "text", value: "boom" } },
    ]);
    assert.deepEqual(toolResults(model.doGenerateCalls[1]), BOOM_SEEN);
    // The step records the failed call as the SDK's tool-error, with the result.
    const failed = result.steps[0].content.find((p) => p.type === "tool-error");
    assert.ok(failed?.type === "tool-error" && failed.error instanceof ToolResultError, JSON.stringify(failed));
    assert.equal((failed.error as ToolResultError).result.callId, "failed");
  });

  test("progress streams as preliminary tool results; the model sees the final one", async () => {
    const call = { type: "tool-call" as const, toolCallId: "nap", toolName: "sleep", input: '{"ms":50}' };
    const finish = (unified: "tool-calls" | "stop") => ({ type: "finish" as const, finishReason: { unified, raw: unified }, usage });
    const model = new MockLanguageModelV3({
      doStream: [
        { stream: simulateReadableStream({ chunks: [{ type: "stream-start", warnings: [] }, call, finish("tool-calls")] }) },
        {
          stream: simulateReadableStream({
            chunks: [{ type: "stream-start", warnings: [] }, { type: "text-start", id: "t" }, { type: "text-delta", id: "t", delta: "done" }, { type: "text-end", id: "t" }, finish("stop")],
          }),
        },
      ],
    });
    const result = streamText({ model, tools: aiTools(new StepBatcher(client), listed, { preliminaryProgress: true }), prompt: "go", stopWhen: stepCountIs(2) });
    const outputs: [boolean, unknown][] = [];
    for await (const part of result.fullStream) if (part.type === "tool-result") outputs.push([part.preliminary ?? false, part.output]);
    assert.equal(await result.text, "done");
    assert.deepEqual(outputs[0], [true, "sleeping 50 ms"]);
    assert.deepEqual(outputs.at(-1)?.[0], false);
    assert.match(String(outputs.at(-1)?.[1]), /^\{"slept_ms":\d+\}$/);
    assert.match(toolResults(model.doStreamCalls[1])[0].text, /^\{"slept_ms":\d+\}$/);
  });

  test("a failed call streams as a tool-error; progress before it as preliminary results", async () => {
    const call = { type: "tool-call" as const, toolCallId: "failed", toolName: "fail", input: '{"message":"boom"}' };
    const finish = (unified: "tool-calls" | "stop") => ({ type: "finish" as const, finishReason: { unified, raw: unified }, usage });
    const model = new MockLanguageModelV3({
      doStream: [
        { stream: simulateReadableStream({ chunks: [{ type: "stream-start", warnings: [] }, call, finish("tool-calls")] }) },
        { stream: simulateReadableStream({ chunks: [{ type: "stream-start", warnings: [] }, finish("stop")] }) },
      ],
    });
    const result = streamText({ model, tools: aiTools(new StepBatcher(client), listed, { preliminaryProgress: true }), prompt: "go", stopWhen: stepCountIs(2) });
    const errors: unknown[] = [];
    for await (const part of result.fullStream) if (part.type === "tool-error") errors.push(part.error);
    await result.text;
    assert.equal(errors.length, 1);
    assert.ok(errors[0] instanceof ToolResultError);
    assert.deepEqual(toolOutputs(model.doStreamCalls[1]), [{ id: "failed", output: { type: "error-text", value: "boom" } }]);
  });

  test("an abort cancels the running calls", async () => {
    const batches: BatchAccepted[] = [];
    const abort = new AbortController();
    const batcher = new StepBatcher(client, { onBatch: (a) => batches.push(a) });
    const model = new MockLanguageModelV3({
      doGenerate: [toolCalls([{ id: "nap", name: "sleep", args: { ms: 30_000 } }, { id: "hi", name: "echo", args: { text: "hi" } }]), answer("never")],
    });
    const run = generateText({
      model,
      tools: aiTools(batcher, listed, { onProgress: () => abort.abort() }),
      prompt: "go",
      stopWhen: stepCountIs(2),
      abortSignal: abort.signal,
    });
    await assert.rejects(run, (err: Error) => err.name === "AbortError" || /abort/i.test(String(err)));
    assert.equal(batches.length, 1);
    assert.equal(await serverOutcome(batches[0].batchId, "nap"), "cancelled");
    assert.equal(model.doGenerateCalls.length, 1, "the model was asked again after the abort");
  });
});

describe("AI SDK adapter: a failed RPC ends the run", { skip: skip || skipOwnServer }, () => {
  let listed: Tool[];
  before(async () => {
    const client = new ToolwireClient(addr);
    listed = (await client.listTools()).tools;
    client.close();
  });

  for (const server of FAILING_SERVERS) {
    test(`generateText rejects with the ToolwireError, with ${server.name}`, async () => {
      const { client, done } = await server.client();
      try {
        const model = new MockLanguageModelV3({ doGenerate: [toolCalls(STEP), answer("never")] });
        await assert.rejects(
          generateText({ model, tools: aiTools(new StepBatcher(client), listed), prompt: "go", stopWhen: stepCountIs(5) }),
          (err) => assertRunEnding(err, server.code),
        );
        assert.equal(model.doGenerateCalls.length, 1, "the model was asked again after the RPC failed");
      } finally {
        await done();
      }
    });

    test(`streamText's stream throws the ToolwireError, with ${server.name}`, async () => {
      const { client, done } = await server.client();
      try {
        const finish = (unified: "tool-calls" | "stop") => ({ type: "finish" as const, finishReason: { unified, raw: unified }, usage });
        const call = { type: "tool-call" as const, toolCallId: "hi", toolName: "echo", input: '{"text":"hi"}' };
        const model = new MockLanguageModelV3({
          doStream: [
            { stream: simulateReadableStream({ chunks: [{ type: "stream-start", warnings: [] }, call, finish("tool-calls")] }) },
            { stream: simulateReadableStream({ chunks: [{ type: "stream-start", warnings: [] }, finish("stop")] }) },
          ],
        });
        const result = streamText({ model, tools: aiTools(new StepBatcher(client), listed, { preliminaryProgress: true }), prompt: "go", stopWhen: stepCountIs(5) });
        await assert.rejects(
          (async () => {
            for await (const _ of result.fullStream);
          })(),
          (err) => assertRunEnding(err, server.code),
        );
        await assert.rejects(Promise.resolve(result.text), (err) => assertRunEnding(err, server.code));
        assert.equal(model.doStreamCalls.length, 1, "the model was asked again after the RPC failed");
      } finally {
        await done();
      }
    });
  }
});
