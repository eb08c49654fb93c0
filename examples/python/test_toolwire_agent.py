"""Tests of the Python agent loop: the scenario against a real server at
$TOOLWIRE_ADDR, wrong expectations that the checker must report, and the
OpenAI adapters.

    TOOLWIRE_ADDR=127.0.0.1:50051 /usr/bin/python3 -m unittest discover -s examples/python -v
"""

import copy
import os
import unittest

import grpc

import toolwire_agent as agent
from toolwire_agent import pb, pb_grpc

ADDR = os.environ.get("TOOLWIRE_ADDR")
REQUIRE_ALL = os.environ.get("TOOLWIRE_TEST_REQUIRE_ALL")


def step(scenario, name):
    return next(s for s in scenario["steps"] if s["name"] == name)


class ScenarioTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not ADDR:
            if REQUIRE_ALL:
                raise AssertionError("TOOLWIRE_ADDR is not set, and TOOLWIRE_TEST_REQUIRE_ALL is: .ci/run must start a server")
            raise unittest.SkipTest("TOOLWIRE_ADDR is not set: start `toolwire serve --diag` and set it")
        cls.channel = grpc.insecure_channel(ADDR)
        cls.stub = pb_grpc.ToolServiceStub(cls.channel)

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()

    def test_scenario(self):
        chat, mismatches = agent.run(self.stub, agent.load_scenario())
        self.assertEqual(mismatches, [])
        messages = chat["messages"]
        # user, 1+7 for the mixed batch, 1+1 for the progress call, the final answer.
        self.assertEqual(len(messages), 12)
        self.assertIn({"role": "tool", "tool_call_id": "write_c", "content": "disk full"}, messages)
        self.assertEqual([m["tool_call_id"] for m in messages[2:9]],
                         ["read_a", "read_b", "write_c", "ghost_d", "bad_e", "read_f", "bad_g"])
        names = [t["function"]["name"] for t in chat["tools"]]
        self.assertTrue({"echo", "sleep", "fail"} <= set(names), names)

    def test_checker_reports_wrong_expectations(self):
        cases = [
            ("error kind",
             lambda s: step(s, "mixed_batch")["expect"]["calls"]["write_c"]["result"].update(error_kind="ERROR_KIND_TIMEOUT"),
             "mixed_batch: call write_c: error_kind ERROR_KIND_TOOL_ERROR, want ERROR_KIND_TIMEOUT"),
            ("lane plan",
             lambda s: step(s, "mixed_batch")["expect"]["lanes"][1].update(parallel=True),
             "mixed_batch: lanes "),
            ("finished counts",
             lambda s: step(s, "mixed_batch")["expect"]["finished"].update(failed=3),
             "finished failed = 4, want 3"),
            ("events",
             lambda s: step(s, "progress")["expect"]["calls"]["nap"].update(events="^SR$"),
             "progress: call nap: events 'SP"),
            ("rpc status",
             lambda s: step(s, "cancel_mid_way")["expect"].update(rpc_status="OK"),
             "cancel_mid_way: the RPC ended with CANCELLED"),
            ("declarations",
             lambda s: s["steps"][0]["list_tools"]["tools_include"][1].update(read_only=True),
             "declarations: tool 'fail': read_only False, want True"),
        ]
        base = agent.load_scenario()
        for name, mutate, want in cases:
            with self.subTest(name):
                scenario = copy.deepcopy(base)
                mutate(scenario)
                _, mismatches = agent.run(self.stub, scenario)
                self.assertTrue(any(want in m for m in mismatches), f"mismatches {mismatches} lack {want!r}")


class AdapterTest(unittest.TestCase):
    def test_from_openai_tool_calls(self):
        calls = agent.from_openai_tool_calls([
            {"id": "a", "type": "function", "function": {"name": "echo", "arguments": '{"text":"hi"}'}},
            {"id": "b", "function": {"name": "sleep", "arguments": {"ms": 5}}},
            {"id": "c", "type": "function", "function": {"name": "fail"}},
        ])
        self.assertEqual([(c.call_id, c.name, c.arguments) for c in calls],
                         [("a", "echo", '{"text":"hi"}'), ("b", "sleep", '{"ms": 5}'), ("c", "fail", "")])
        with self.assertRaisesRegex(ValueError, "not supported"):
            agent.from_openai_tool_calls([{"id": "x", "type": "custom", "custom": {}}])

    def test_openai_tool_message(self):
        result = pb.CallResult(call_id="a", content=[
            pb.Content(text=pb.TextContent(text="line")),
            pb.Content(image=pb.ImageContent(data=b"\x89PNG", mime_type="image/png")),
        ])
        self.assertEqual(agent.openai_tool_message(result), {
            "role": "tool", "tool_call_id": "a",
            "content": "line\n[image (image/png, 4 bytes) left out: tool messages carry text only]",
        })

    def test_openai_tools(self):
        tools = agent.openai_tools([pb.Tool(name="t", description="d"),
                                    pb.Tool(name="u", input_schema='{"type":"object","required":["x"]}')])
        self.assertEqual(tools[0], {"type": "function", "function": {
            "name": "t", "description": "d", "parameters": {"type": "object", "properties": {}}}})
        self.assertEqual(tools[1]["function"]["parameters"]["required"], ["x"])


if __name__ == "__main__":
    unittest.main()
