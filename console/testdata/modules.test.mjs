// The console's pure modules under Node's test runner: the validator the
// forms use, and the Connect stream's frame decoder. Run by console's Go
// test (TestModules) with the machine's node.
import assert from "node:assert/strict";
import { test } from "node:test";
import { frames } from "../static/js/rpc.js";
import { validate } from "../static/js/schema.js";

const schema = {
  type: "object",
  properties: {
    name: { type: "string", minLength: 1 },
    n: { type: "integer", minimum: 0, maximum: 10 },
    mode: { enum: ["fast", "slow"] },
    tags: { type: "array", items: { type: "string" }, maxItems: 2 },
    user: { type: "object", properties: { city: { type: "string", pattern: "^[A-Z]" } }, required: ["city"] },
  },
  required: ["name"],
  additionalProperties: false,
};

test("validate accepts what the schema allows", () => {
  assert.deepEqual(validate(schema, { name: "a", n: 3, mode: "fast", tags: ["x"], user: { city: "Oslo" } }), []);
});

test("validate names each field and why", () => {
  const got = validate(schema, { n: 11.5, mode: "medium", tags: ["x", 1, "z"], user: { city: "oslo" }, extra: true })
    .map((p) => `${p.path} ${p.message}`);
  assert.deepEqual(got.sort(), [
    "extra is not a property of this tool's arguments",
    "mode must be one of \"fast\", \"slow\"",
    "n must be integer, not number",
    "name is required",
    "tags must have at most 2 items",
    "tags[1] must be string, not integer",
    "user.city must match ^[A-Z]",
  ].sort());
});

test("validate refuses arguments that are not an object", () => {
  assert.equal(validate(schema, [1])[0].message, "must be object, not array");
});

function stream(chunks) {
  return new ReadableStream({
    start(c) {
      for (const ch of chunks) c.enqueue(ch);
      c.close();
    },
  });
}

function frame(flags, text) {
  const data = new TextEncoder().encode(text);
  const out = new Uint8Array(5 + data.length);
  out[0] = flags;
  new DataView(out.buffer).setUint32(1, data.length);
  out.set(data, 5);
  return out;
}

test("frames reads frames split anywhere across chunks", async () => {
  const all = new Uint8Array([...frame(0, '{"a":1}'), ...frame(0, ""), ...frame(2, "{}")]);
  for (const cut of [1, 3, 5, 7, 12, all.length - 1]) {
    const got = [];
    for await (const f of frames(stream([all.slice(0, cut), all.slice(cut)]))) got.push([f.flags, new TextDecoder().decode(f.data)]);
    assert.deepEqual(got, [[0, '{"a":1}'], [0, ""], [2, "{}"]], `cut at ${cut}`);
  }
});

test("frames refuses a stream that ends inside a frame", async () => {
  await assert.rejects(async () => {
    for await (const _ of frames(stream([frame(0, '{"a":1}').slice(0, 8)]))) {
      // nothing
    }
  }, /inside a frame/);
});
