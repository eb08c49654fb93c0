"""Tests of the Python agent loop: the scenario against a real server at
$TOOLWIRE_ADDR, and wrong expectations that the checker must report. (The
OpenAI adapters are the toolwire package's, tested in clients/python.)

    TOOLWIRE_ADDR=127.0.0.1:50051 python3 -m unittest discover -s examples/python -v
"""

import copy
import os
import unittest

import toolwire_agent as agent
from toolwire_agent import toolwire

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
        cls.client = toolwire.Client(ADDR)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()

    def test_scenario(self):
        chat, mismatches = agent.run(self.client, agent.load_scenario())
        self.assertEqual(mismatches, [])
        messages = chat["messages"]
        # user, 1+7 for the mixed batch, 1+1 for the progress call, the final answer.
        self.assertEqual(len(messages), 12)
        self.assertIn({"role": "tool", "tool_call_id": "write_c", "content": "Error: disk full"}, messages)
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
                _, mismatches = agent.run(self.client, scenario)
                self.assertTrue(any(want in m for m in mismatches), f"mismatches {mismatches} lack {want!r}")


if __name__ == "__main__":
    unittest.main()
