// Runs the agent loop and the conformance scenario against a running
// `toolwire serve --diag`:
//
//   npm start -- [--addr 127.0.0.1:50051] [-v]     (or TOOLWIRE_ADDR)
//
// It exits 1 if the server's answers differ from the scenario.

import { parseArgs } from "node:util";
import { ToolwireClient } from "@toolwire/client";
import { DEFAULT_SCENARIO, loadScenario, run } from "./agent.js";

async function main(): Promise<number> {
  const { values } = parseArgs({
    options: {
      addr: { type: "string", default: process.env.TOOLWIRE_ADDR ?? "127.0.0.1:50051" },
      scenario: { type: "string", default: DEFAULT_SCENARIO },
      v: { type: "boolean", short: "v", default: false },
    },
  });
  const scenario = loadScenario(values.scenario);
  const client = new ToolwireClient(values.addr!);
  try {
    const { chat, mismatches } = await run(client, scenario);
    if (values.v) console.log(JSON.stringify(chat, null, 2));
    for (const m of mismatches) console.log("MISMATCH", m);
    if (mismatches.length > 0) return 1;
    console.log(`scenario passed: ${scenario.steps.length} steps, ${chat.messages.length} messages in the conversation`);
    return 0;
  } finally {
    client.close();
  }
}

main().then(
  (code) => {
    process.exitCode = code;
  },
  (err) => {
    console.error("example:", err);
    process.exitCode = 1;
  },
);
