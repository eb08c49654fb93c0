// The OpenAI Agents JS adapter, driven by a scripted Model (the SDK's Model
// interface, no network) through the SDK's own run() against a real
// toolwire server.

import { after, before, describe, test } from "node:test";
import * as assert from "node:assert/strict";
import {
  Agent,
  ModelBehaviorError,
  run,
  setTracingDisabled,
  ToolCallError,
  Usage,
  type AgentInputItem,
  type Model,
  type ModelRequest,
  type ModelResponse,
} from "@openai/agents";
import { BatchAccepted, ERROR_PREFIX, StepBatcher, Tool, ToolwireClient, ToolwireError } from "@toolwire/client";
import { agentsTools } from "@toolwire/client/openai-agents";
import {
  addr,
  assertOneBatch,
  assertRunEnding,
  assertStepResults,
  BOOM_SEEN,
  BOOM_STEP,
  FAILING_SERVERS,
  FINAL,
  seenPrefixed,
  type Seen,
  serverOutcome,
  skip,
  skipOwnServer,
  STALE_TOOL,
  STEP,
  UNKNOWN_TEXT,
} from "./fixture.js";

setTracingDisabled(true); // no exporter: nothing leaves the machine

type Call = { id: string; name: string; args: unknown };

/** A Model that answers with scripted turns and records each request. */
class ScriptedModel implements Model {
  readonly requests: ModelRequest[] = [];
  constructor(private readonly turns: (Call[] | string)[]) {}

  async getResponse(request: ModelRequest): Promise<ModelResponse> {
    this.requests.push(request);
    const turn = this.turns[this.requests.length - 1];
    if (turn === undefined) throw new Error("the script has no more turns");
    const output: ModelResponse["output"] =
      typeof turn === "string"
        ? [{ type: "message", role: "assistant", status: "completed", content: [{ type: "output_text", text: turn }] }]
        : turn.map((c) => ({ type: "function_call", callId: c.id, name: c.name, arguments: JSON.stringify(c.args), status: "completed" }));
    return { usage: new Usage(), output, responseId: `r${this.requests.length}` };
  }

  // eslint-disable-next-line require-yield
  async *getStreamedResponse(): AsyncIterable<never> {
    throw new Error("the tests do not stream");
  }
}

/** The tool results the model was shown in a request, in order, as the
 * text of each function call output. */
function toolTexts(req: ModelRequest): { id: string; text: string }[] {
  const items = typeof req.input === "string" ? [] : req.input;
  return items.flatMap((it: AgentInputItem) => {
    if (it.type !== "function_call_result") return [];
    const out = it.output as unknown;
    const text = typeof out === "string" ? out : (out as { text?: string }).text ?? JSON.stringify(out);
    return [{ id: it.callId, text }];
  });
}

/** The same, flagged as failed by ERROR_PREFIX (outputs have no error flag). */
function toolResults(req: ModelRequest): Seen[] {
  return toolTexts(req).map((r) => seenPrefixed(r.id, r.text));
}

describe("OpenAI Agents JS adapter", { skip }, () => {
  let client: ToolwireClient;
  let listed: Tool[];
  before(async () => {
    client = new ToolwireClient(addr);
    listed = (await client.listTools()).tools;
  });
  after(() => client?.close());

  test("a turn's calls run as one batch and the final answer sees every result", async () => {
    const batches: BatchAccepted[] = [];
    const batcher = new StepBatcher(client, { onBatch: (a) => batches.push(a) });
    const model = new ScriptedModel([STEP, FINAL]);
    const agent = new Agent({ name: "toolwire", instructions: "Use the tools.", model, tools: agentsTools(batcher, listed) });
    const result = await run(agent, "go");

    assertOneBatch(batches);
    assert.equal(result.finalOutput, FINAL);
    assertStepResults(toolResults(model.requests[1]));
  });

  test("an unknown tool's error reaches the model as text", async () => {
    const model = new ScriptedModel([[{ id: "ghost", name: "search_web", args: { q: "x" } }], "ok"]);
    const agent = new Agent({ name: "toolwire", model, tools: agentsTools(new StepBatcher(client), [...listed, STALE_TOOL]) });
    const result = await run(agent, "go");
    assert.equal(result.finalOutput, "ok");
    const [r] = toolTexts(model.requests[1]);
    assert.ok(r.text.startsWith(ERROR_PREFIX + UNKNOWN_TEXT), r.text);
  });

  test("a failed call's output starts with the error prefix; an echo of its text does not", async () => {
    const model = new ScriptedModel([BOOM_STEP, "ok"]);
    const agent = new Agent({ name: "toolwire", model, tools: agentsTools(new StepBatcher(client), listed) });
    const result = await run(agent, "go");
    assert.equal(result.finalOutput, "ok");
    assert.deepEqual(toolTexts(model.requests[1]), [
      { id: "failed", text: "Error: boom" },
      { id: "echoed", text: "boom" },
    ]);
    assert.deepEqual(toolResults(model.requests[1]), BOOM_SEEN);
  });

  test("a name the agent was not given ends the run unless toolNotFoundBehavior returns it to the model", async () => {
    // The SDK checks names before any tool runs: toolwire never sees the call.
    const made_up = [{ id: "ghost", name: "search_web", args: { q: "x" } }];
    const tools = agentsTools(new StepBatcher(client), listed);
    await assert.rejects(run(new Agent({ name: "toolwire", model: new ScriptedModel([made_up, "ok"]), tools }), "go"), ModelBehaviorError);

    const model = new ScriptedModel([made_up, "ok"]);
    const result = await run(new Agent({ name: "toolwire", model, tools }), "go", { toolNotFoundBehavior: "return_error_to_model" });
    assert.equal(result.finalOutput, "ok");
    assert.deepEqual(toolTexts(model.requests[1]), [{ id: "ghost", text: "Tool 'search_web' not found." }]);
  });

  test("an abort cancels the running calls", async () => {
    const batches: BatchAccepted[] = [];
    const abort = new AbortController();
    const batcher = new StepBatcher(client, { onBatch: (a) => batches.push(a) });
    const model = new ScriptedModel([
      [
        { id: "nap", name: "sleep", args: { ms: 30_000 } },
        { id: "hi", name: "echo", args: { text: "hi" } },
      ],
      "never",
    ]);
    const agent = new Agent({ name: "toolwire", model, tools: agentsTools(batcher, listed, { onProgress: () => abort.abort() }) });
    await assert.rejects(run(agent, "go", { signal: abort.signal }));
    assert.equal(batches.length, 1);
    assert.equal(await serverOutcome(batches[0].batchId, "nap"), "cancelled");
    assert.equal(model.requests.length, 1, "the model was asked again after the abort");
  });
});

describe("OpenAI Agents JS adapter: a failed RPC ends the run", { skip: skip || skipOwnServer }, () => {
  let listed: Tool[];
  before(async () => {
    const client = new ToolwireClient(addr);
    listed = (await client.listTools()).tools;
    client.close();
  });

  for (const server of FAILING_SERVERS) {
    test(`run rejects with the ToolwireError (in the SDK's ToolCallError), with ${server.name}`, async () => {
      const { client, done } = await server.client();
      try {
        const model = new ScriptedModel([STEP, "never"]);
        const agent = new Agent({ name: "toolwire", model, tools: agentsTools(new StepBatcher(client), listed) });
        await assert.rejects(run(agent, "go"), (err) => {
          assert.ok(err instanceof ToolCallError, `not a ToolCallError: ${String(err)}`);
          assert.ok(err.error instanceof ToolwireError);
          assert.equal(ToolwireError.find(err), err.error);
          return assertRunEnding(err.error, server.code);
        });
        assert.equal(model.requests.length, 1, "the model was asked again after the RPC failed");
      } finally {
        await done();
      }
    });
  }
});
