// The OpenAI Agents JS adapter, driven by a scripted Model (the SDK's Model
// interface, no network) through the SDK's own run() against a real
// toolwire server.

import { after, before, describe, test } from "node:test";
import * as assert from "node:assert/strict";
import { Agent, run, setTracingDisabled, Usage, type AgentInputItem, type Model, type ModelRequest, type ModelResponse } from "@openai/agents";
import { BatchAccepted, StepBatcher, Tool, ToolwireClient } from "@toolwire/client";
import { agentsTools } from "@toolwire/client/openai-agents";
import { addr, assertOneBatch, assertStepResults, FINAL, serverOutcome, skip, STALE_TOOL, STEP, UNKNOWN_TEXT } from "./fixture.js";

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

/** The tool results the model was shown in a request, in order. */
function toolResults(req: ModelRequest): { id: string; text: string }[] {
  const items = typeof req.input === "string" ? [] : req.input;
  return items.flatMap((it: AgentInputItem) => {
    if (it.type !== "function_call_result") return [];
    const out = it.output as unknown;
    const text = typeof out === "string" ? out : (out as { text?: string }).text ?? JSON.stringify(out);
    return [{ id: it.callId, text }];
  });
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
    const [r] = toolResults(model.requests[1]);
    assert.ok(r.text.startsWith(UNKNOWN_TEXT), r.text);
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
