// The LangChain.js adapter, driven by LangChain's fakeModel (a scripted chat
// model with tool calls) through the tool-calling loop LangChain documents
// (bindTools, then invoke each tool call and append the ToolMessages), against
// a real toolwire server.

import { after, before, describe, test } from "node:test";
import * as assert from "node:assert/strict";
import { AIMessage, HumanMessage, ToolMessage, type BaseMessage } from "@langchain/core/messages";
import { fakeModel } from "@langchain/core/testing";
import type { DynamicStructuredTool } from "@langchain/core/tools";
import { BatchAccepted, StepBatcher, Tool, ToolwireClient } from "@toolwire/client";
import { langchainTools, PROGRESS_EVENT } from "@toolwire/client/langchain";
import {
  addr,
  assertOneBatch,
  assertRunEnding,
  assertStepResults,
  BOOM_SEEN,
  BOOM_STEP,
  FAILING_SERVERS,
  FINAL,
  type Seen,
  serverOutcome,
  skip,
  skipOwnServer,
  STALE_TOOL,
  STEP,
  UNKNOWN_TEXT,
} from "./fixture.js";

type Model = ReturnType<typeof fakeModel>;

/** The agent loop: ask the model, run its tool calls at once, repeat until it
 * answers in text. */
async function agent(model: Model, tools: DynamicStructuredTool[], signal?: AbortSignal): Promise<BaseMessage[]> {
  const byName = new Map(tools.map((t) => [t.name, t]));
  const bound = model.bindTools(tools);
  const messages: BaseMessage[] = [new HumanMessage("go")];
  for (;;) {
    const ai = await bound.invoke(messages, { signal });
    messages.push(ai);
    if (!ai.tool_calls?.length) return messages;
    // As the README shows: a name the model was not given is answered here.
    const results = await Promise.all(
      ai.tool_calls.map(
        (tc) =>
          (byName.get(tc.name)?.invoke(tc, { signal }) as Promise<ToolMessage> | undefined) ??
          new ToolMessage({ content: `Error: no tool named ${tc.name}`, tool_call_id: tc.id!, status: "error" }),
      ),
    );
    messages.push(...results);
  }
}

/** The tool results the model was shown on its n-th call, flagged as failed
 * by the ToolMessage's status. */
function toolResults(model: Model, n: number): Seen[] {
  return model.calls[n].messages.flatMap((m) => (ToolMessage.isInstance(m) ? [{ id: m.tool_call_id, text: String(m.content), error: m.status === "error" }] : []));
}

describe("LangChain.js adapter", { skip }, () => {
  let client: ToolwireClient;
  let listed: Tool[];
  before(async () => {
    client = new ToolwireClient(addr);
    listed = (await client.listTools()).tools;
  });
  after(() => client?.close());

  test("a message's tool calls run as one batch and the final answer sees every result", async () => {
    const batches: BatchAccepted[] = [];
    const batcher = new StepBatcher(client, { onBatch: (a) => batches.push(a) });
    const model = fakeModel()
      .respondWithTools(STEP.map((c) => ({ id: c.id, name: c.name, args: c.args })))
      .respond(new AIMessage(FINAL));
    const messages = await agent(model, langchainTools(batcher, listed));

    assertOneBatch(batches);
    assert.equal(messages.at(-1)?.content, FINAL);
    assertStepResults(toolResults(model, 1));
  });

  test("an unknown tool's error reaches the model as text", async () => {
    const model = fakeModel()
      .respondWithTools([{ id: "ghost", name: "search_web", args: { q: "x" } }])
      .respond(new AIMessage("ok"));
    const messages = await agent(model, langchainTools(new StepBatcher(client), [...listed, STALE_TOOL]));
    assert.equal(messages.at(-1)?.content, "ok");
    const [r] = toolResults(model, 1);
    assert.ok(r.text.startsWith(UNKNOWN_TEXT), r.text);
    assert.equal(r.error, true);
  });

  test("a name the model was not given is answered by the loop, as the README shows", async () => {
    const batches: BatchAccepted[] = [];
    const model = fakeModel()
      .respondWithTools([{ id: "ghost", name: "made_up", args: {} }])
      .respond(new AIMessage("ok"));
    const messages = await agent(model, langchainTools(new StepBatcher(client, { onBatch: (a) => batches.push(a) }), listed));
    assert.equal(messages.at(-1)?.content, "ok");
    assert.deepEqual(toolResults(model, 1), [{ id: "ghost", text: "Error: no tool named made_up", error: true }]);
    assert.equal(batches.length, 0);
  });

  test("a failed call's ToolMessage has status error; an echo of its text has status success", async () => {
    const model = fakeModel()
      .respondWithTools(BOOM_STEP.map((c) => ({ id: c.id, name: c.name, args: c.args })))
      .respond(new AIMessage("ok"));
    const messages = await agent(model, langchainTools(new StepBatcher(client), listed));
    assert.equal(messages.at(-1)?.content, "ok");
    assert.deepEqual(toolResults(model, 1), BOOM_SEEN);
    assert.deepEqual(
      messages.flatMap((m) => (ToolMessage.isInstance(m) ? [m.status] : [])),
      ["error", "success"],
    );
  });

  test("invoked without a tool call, a failed call's text starts with the error prefix", async () => {
    const [fail] = langchainTools(new StepBatcher(client), listed.filter((t) => t.name === "fail"));
    assert.equal(await fail.invoke({ message: "boom" }), "Error: boom");
  });

  test("arguments that do not match the schema reach the model as toolwire's error text, in the step's batch", async () => {
    // LangChain checks arguments against the schema itself and throws
    // ToolInputParsingException, which rejected the step's Promise.all.
    const batches: BatchAccepted[] = [];
    const model = fakeModel()
      .respondWithTools([
        { id: "hi", name: "echo", args: { text: "hi" } },
        { id: "bad", name: "fail", args: {} },
      ])
      .respond(new AIMessage("ok"));
    const messages = await agent(model, langchainTools(new StepBatcher(client, { onBatch: (a) => batches.push(a) }), listed));
    assert.equal(messages.at(-1)?.content, "ok");
    assert.deepEqual(toolResults(model, 1), [
      { id: "hi", text: "hi", error: false },
      { id: "bad", text: `invalid arguments for "fail": arguments do not match the tool's input schema:\n- /: missing property 'message'`, error: true },
    ]);
    assert.equal(batches.length, 1, "both calls in one batch");
  });

  test("progress reaches the run's callbacks as custom events", async () => {
    const [sleep] = langchainTools(new StepBatcher(client), listed.filter((t) => t.name === "sleep"));
    const events: [string, string][] = [];
    const msg = (await sleep.invoke(
      { id: "nap", name: "sleep", args: { ms: 30 }, type: "tool_call" },
      { callbacks: [{ handleCustomEvent: (name: string, data: { message: string }) => void events.push([name, data.message]) }] },
    )) as ToolMessage;
    assert.match(String(msg.content), /^\{"slept_ms":\d+\}$/);
    assert.deepEqual(events[0], [PROGRESS_EVENT, "sleeping 30 ms"]);
  });

  test("an abort cancels the running calls", async () => {
    const batches: BatchAccepted[] = [];
    const abort = new AbortController();
    const batcher = new StepBatcher(client, { onBatch: (a) => batches.push(a) });
    const model = fakeModel()
      .respondWithTools([
        { id: "nap", name: "sleep", args: { ms: 30_000 } },
        { id: "hi", name: "echo", args: { text: "hi" } },
      ])
      .respond(new AIMessage("never"));
    const tools = langchainTools(batcher, listed, { onProgress: () => abort.abort() });
    await assert.rejects(agent(model, tools, abort.signal));
    assert.equal(batches.length, 1);
    assert.equal(await serverOutcome(batches[0].batchId, "nap"), "cancelled");
    assert.equal(model.callCount, 1, "the model was asked again after the abort");
  });
});

describe("LangChain.js adapter: a failed RPC ends the run", { skip: skip || skipOwnServer }, () => {
  let listed: Tool[];
  before(async () => {
    const client = new ToolwireClient(addr);
    listed = (await client.listTools()).tools;
    client.close();
  });

  for (const server of FAILING_SERVERS) {
    test(`the tool calls reject with the ToolwireError, with ${server.name}`, async () => {
      const { client, done } = await server.client();
      try {
        const model = fakeModel()
          .respondWithTools(STEP.map((c) => ({ id: c.id, name: c.name, args: c.args })))
          .respond(new AIMessage("never"));
        await assert.rejects(agent(model, langchainTools(new StepBatcher(client), listed)), (err) => assertRunEnding(err, server.code));
        assert.equal(model.callCount, 1, "the model was asked again after the RPC failed");
      } finally {
        await done();
      }
    });
  }
});
