// The AI SDK adapter, driven by the SDK's own MockLanguageModelV3 through
// generateText against a real toolwire server.

import { after, before, describe, test } from "node:test";
import * as assert from "node:assert/strict";
import { generateText, simulateReadableStream, stepCountIs, streamText } from "ai";
import { MockLanguageModelV3 } from "ai/test";
import type { LanguageModelV3CallOptions, LanguageModelV3GenerateResult } from "@ai-sdk/provider";
import { BatchAccepted, StepBatcher, Tool, ToolwireClient } from "@toolwire/client";
import { aiTools } from "@toolwire/client/ai";
import { addr, assertOneBatch, assertStepResults, FINAL, serverOutcome, skip, STALE_TOOL, STEP, UNKNOWN_TEXT } from "./fixture.js";

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

/** The tool results the model was shown in its prompt, in order. */
function toolResults(call: LanguageModelV3CallOptions): { id: string; text: string }[] {
  return call.prompt.flatMap((m) =>
    m.role === "tool"
      ? m.content.flatMap((p) => (p.type === "tool-result" ? [{ id: p.toolCallId, text: p.output.type === "text" ? p.output.value : JSON.stringify(p.output) }] : []))
      : [],
  );
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
