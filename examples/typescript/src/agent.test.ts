// Tests of the TypeScript agent loop: the scenario against a real server at
// $TOOLWIRE_ADDR, wrong expectations that the checker must report, and the
// OpenAI adapters. Run with `npm test` (tsc, then node --test).

import { after, before, describe, test } from "node:test";
import * as assert from "node:assert/strict";
import { CallResult, Content, Tool, ToolwireClient } from "@toolwire/client";
import { fromOpenAIToolCalls, loadScenario, openAITools, openAIToolMessage, run, Scenario, Step } from "./agent.js";

const addr = process.env.TOOLWIRE_ADDR;
const requireAll = !!process.env.TOOLWIRE_TEST_REQUIRE_ALL;

function step(s: Scenario, name: string): Step {
  const found = s.steps.find((st) => st.name === name);
  assert.ok(found, `no step ${name}`);
  return found;
}

describe("scenario", { skip: !addr && !requireAll && "TOOLWIRE_ADDR is not set: start `toolwire serve --diag` and set it" }, () => {
  let client: ToolwireClient;
  before(() => {
    assert.ok(addr, "TOOLWIRE_ADDR is not set, and TOOLWIRE_TEST_REQUIRE_ALL is: .ci/run must start a server");
    client = new ToolwireClient(addr);
  });
  after(() => client?.close());

  test("the server conforms", async () => {
    const { chat, mismatches } = await run(client, loadScenario());
    assert.deepEqual(mismatches, []);
    // user, 1+7 for the mixed batch, 1+1 for the progress call, the final answer.
    assert.equal(chat.messages.length, 12);
    assert.deepEqual(chat.messages[4], { role: "tool", tool_call_id: "write_c", content: "disk full" });
    assert.deepEqual(
      chat.messages.slice(2, 9).map((m) => (m.role === "tool" ? m.tool_call_id : m.role)),
      ["read_a", "read_b", "write_c", "ghost_d", "bad_e", "read_f", "bad_g"],
    );
    const names = chat.tools.map((t) => t.function.name);
    for (const n of ["echo", "fail", "sleep"]) assert.ok(names.includes(n), `${n} not in ${names}`);
  });

  const cases: [string, (s: Scenario) => void, string][] = [
    [
      "error kind",
      (s) => (step(s, "mixed_batch").expect!.calls!.write_c.result!.error_kind = "ERROR_KIND_TIMEOUT"),
      "mixed_batch: call write_c: error_kind ERROR_KIND_TOOL_ERROR, want ERROR_KIND_TIMEOUT",
    ],
    ["lane plan", (s) => (step(s, "mixed_batch").expect!.lanes![1].parallel = true), "mixed_batch: lanes "],
    ["finished counts", (s) => (step(s, "mixed_batch").expect!.finished!.failed = 3), "finished failed = 4, want 3"],
    ["events", (s) => (step(s, "progress").expect!.calls!.nap.events = "^SR$"), 'progress: call nap: events "SP'],
    ["rpc status", (s) => (step(s, "cancel_mid_way").expect!.rpc_status = "OK"), "cancel_mid_way: the RPC ended with CANCELLED"],
    [
      "declarations",
      (s) => (s.steps[0].list_tools!.tools_include[1].read_only = true),
      'declarations: tool "fail": read_only false, want true',
    ],
  ];
  for (const [name, mutate, want] of cases) {
    test(`the checker reports a wrong ${name}`, async () => {
      const s = loadScenario();
      mutate(s);
      const { mismatches } = await run(client, s);
      assert.ok(
        mismatches.some((m) => m.includes(want)),
        `mismatches ${JSON.stringify(mismatches)} lack ${JSON.stringify(want)}`,
      );
    });
  }
});

describe("OpenAI adapters", () => {
  test("fromOpenAIToolCalls keeps the arguments text", () => {
    const calls = fromOpenAIToolCalls([
      { id: "a", type: "function", function: { name: "echo", arguments: '{"text":"hi"}' } },
      { id: "b", function: { name: "sleep", arguments: { ms: 5 } } },
      { id: "c", type: "function", function: { name: "fail" } },
    ]);
    assert.deepEqual(
      calls.map((c) => [c.callId, c.name, c.arguments]),
      [
        ["a", "echo", '{"text":"hi"}'],
        ["b", "sleep", '{"ms":5}'],
        ["c", "fail", ""],
      ],
    );
    assert.throws(() => fromOpenAIToolCalls([{ id: "x", type: "custom", function: { name: "y" } }]), /not supported/);
  });

  test("openAIToolMessage carries text and marks images", () => {
    const r = CallResult.fromPartial({
      callId: "a",
      content: [
        Content.fromPartial({ text: { text: "line" } }),
        Content.fromPartial({ image: { data: Buffer.from([0x89, 0x50, 0x4e, 0x47]), mimeType: "image/png" } }),
      ],
    });
    assert.deepEqual(openAIToolMessage(r), {
      role: "tool",
      tool_call_id: "a",
      content: "line\n[image (image/png, 4 bytes) left out: tool messages carry text only]",
    });
  });

  test("openAITools makes function declarations", () => {
    const tools = openAITools([
      Tool.fromPartial({ name: "t", description: "d" }),
      Tool.fromPartial({ name: "u", inputSchema: '{"type":"object","required":["x"]}' }),
    ]);
    assert.deepEqual(tools[0], {
      type: "function",
      function: { name: "t", description: "d", parameters: { type: "object", properties: {} } },
    });
    assert.deepEqual(tools[1].function.parameters.required, ["x"]);
  });
});
