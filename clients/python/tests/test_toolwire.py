"""Tests of the toolwire package against a real `toolwire serve --diag
--log-level debug` at $TOOLWIRE_ADDR (its JSON log at $TOOLWIRE_SERVE_LOG).
CI runs them in a fresh venv with the built wheel installed:

    TOOLWIRE_ADDR=127.0.0.1:50051 python -m unittest discover -s clients/python/tests -v
"""

import asyncio
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import unittest

import grpc

import toolwire
from toolwire import pb
from toolwire.v1 import toolwire_pb2_grpc as pb_grpc

ADDR = os.environ.get("TOOLWIRE_ADDR")
BIN = os.environ.get("TOOLWIRE_BIN")  # the binary, for tests that start servers of their own
REQUIRE_ALL = os.environ.get("TOOLWIRE_TEST_REQUIRE_ALL")
# The token the servers that start_server starts accept, and one they refuse.
TOKEN = "right-token-0123456789abcdef"
WRONG_TOKEN = "wrong-token-0123456789abcdef"

# The model's step: three safe calls with a known delay and an unsafe one.
STEP = [
    {"id": "read_a", "type": "function", "function": {"name": "sleep", "arguments": '{"ms":200}'}},
    {"id": "read_b", "type": "function", "function": {"name": "sleep", "arguments": '{"ms":200}'}},
    {"id": "read_c", "type": "function", "function": {"name": "echo", "arguments": '{"text":"gamma"}'}},
    {"id": "write_d", "type": "function", "function": {"name": "fail", "arguments": '{"message":"disk full"}'}},
]
STEP_LANES = [(["read_a", "read_b", "read_c"], True), (["write_d"], False)]


def need_server():
    if not ADDR:
        if REQUIRE_ALL:
            raise AssertionError("TOOLWIRE_ADDR is not set, and TOOLWIRE_TEST_REQUIRE_ALL is: CI must start a server")
        raise unittest.SkipTest("TOOLWIRE_ADDR is not set: start `toolwire serve --diag --log-level debug` and set it")


def need_bin():
    need_server()
    if not BIN:
        if REQUIRE_ALL:
            raise AssertionError("TOOLWIRE_BIN is not set, and TOOLWIRE_TEST_REQUIRE_ALL is: CI must say where the built toolwire is")
        raise unittest.SkipTest("TOOLWIRE_BIN is not set: build toolwire (go build ./cmd/toolwire) and set it to the binary")


class OwnServer:
    """`toolwire serve --diag` on a free port in an empty temporary
    workspace, accepting TOKEN when with_token, with more flags for serve in
    args; stop() ends it."""

    def __init__(self, with_token=False, args=()):
        self.dir = tempfile.mkdtemp(prefix="toolwire-test-")
        env = dict(os.environ)
        if with_token:
            env["TOOLWIRE_TOKENS"] = f"{{agent: {TOKEN}}}"
        self.log = os.path.join(self.dir, "serve.log")
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen(
                [BIN, "serve", "--diag", "--listen", "127.0.0.1:0", "--log-format", "json", *args],
                cwd=self.dir, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log,
            )
        self.addr = None
        for _ in range(300):
            with open(self.log) as f:
                m = re.search(r'"msg":"toolwire listening on ([^"]+)"', f.read())
            if m:
                self.addr = m.group(1)
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.02)
        self.stop()
        raise AssertionError(f"toolwire serve did not start: {open(self.log).read() if os.path.exists(self.log) else ''}")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(30)
        shutil.rmtree(self.dir, ignore_errors=True)


def assert_run_ending(test, err, code):
    """err is the ToolwireError that ends a run: its status code and a
    one-line message that names it."""
    test.assertIsInstance(err, toolwire.ToolwireError)
    test.assertEqual(err.code, code, str(err))
    test.assertTrue(str(err).startswith(f"toolwire: {code.name}: "), str(err))
    test.assertNotIn("\n", str(err))
    test.assertIsInstance(err.__cause__, grpc.RpcError)


def lanes(accepted):
    return [(list(l.call_ids), l.parallel) for l in accepted.lanes]


async def server_outcome(batch_id, call_id):
    """Waits for the server's "call finished" log line of the call and returns
    its outcome: what happened, seen from toolwire's side. An empty batch_id
    matches any batch, for a call made with call_tool (whose batch ID the
    client never sees) under an ID no other call has."""
    path = os.environ.get("TOOLWIRE_SERVE_LOG")
    assert path, "TOOLWIRE_SERVE_LOG is not set: the cancel test reads the server's log"
    for _ in range(100):
        with open(path) as f:
            for line in f:
                if line.startswith("{"):
                    rec = json.loads(line)
                    if rec.get("msg") == "call finished" and batch_id in ("", rec.get("batch_id")) and rec.get("call_id") == call_id:
                        return rec["outcome"]
        await asyncio.sleep(0.05)
    raise AssertionError(f"no 'call finished' for {batch_id}/{call_id} in the server log: is it at --log-level debug?")


class InstalledTest(unittest.TestCase):
    def test_imported_from_the_installed_wheel(self):
        if os.environ.get("TOOLWIRE_TEST_INSTALLED"):
            self.assertIn("site-packages", toolwire.__file__)
        self.assertTrue(os.path.exists(os.path.join(os.path.dirname(toolwire.__file__), "v1", "toolwire_pb2.py")))


class ClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        need_server()
        cls.client = toolwire.Client(ADDR)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()

    def test_list_tools(self):
        res = self.client.list_tools()
        self.assertTrue(res.revision)
        self.assertLessEqual({"echo", "fail", "sleep"}, {t.name for t in res.tools})

    def test_collect_in_batch_order(self):
        batch = self.client.collect(
            self.client.execute_batch(
                [{"call_id": "slow", "name": "sleep", "arguments": {"ms": 100}}, {"call_id": "fast", "name": "echo", "arguments": '{"text":"quick"}'}]
            )
        )
        self.assertEqual([r.call_id for r in batch.results], ["slow", "fast"])
        self.assertEqual(toolwire.result_text(batch.results[1]), "quick")
        self.assertEqual(batch.finished.succeeded, 2)

    def test_call_tool_error_is_a_result(self):
        r = self.client.call_tool("fail", {"message": "nope"})
        self.assertTrue(r.is_error)
        self.assertEqual(r.error_kind, pb.ERROR_KIND_TOOL_ERROR)
        self.assertEqual(toolwire.result_text(r), "nope")

    def test_call_tool_is_one_unary_call_tool(self):
        methods = []

        class Recorder(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor):
            def intercept_unary_unary(self, continuation, details, request):
                methods.append(details.method)
                return continuation(details, request)

            def intercept_unary_stream(self, continuation, details, request):
                methods.append(details.method)
                return continuation(details, request)

        with toolwire.Client(ADDR) as client:
            client.stub = pb_grpc.ToolServiceStub(grpc.intercept_channel(client.channel, Recorder()))
            r = client.call_tool("echo", {"text": "unary"}, call_id="u1", session_id="py-session")
        self.assertEqual((r.call_id, r.is_error, toolwire.result_text(r)), ("u1", False, "unary"))
        self.assertEqual(methods, ["/toolwire.v1.ToolService/CallTool"])

    def test_call_tool_replays_and_times_out(self):
        key = f"py-key-{os.getpid()}-{time.time_ns()}"
        first = self.client.call_tool("echo", {"text": "once"}, call_id="k1", idempotency_key=key)
        again = self.client.call_tool("echo", {"text": "once"}, call_id="k2", idempotency_key=key)
        self.assertFalse(first.replayed)
        self.assertTrue(again.replayed)
        self.assertEqual((again.call_id, toolwire.result_text(again)), ("k2", "once"))
        slow = self.client.call_tool("sleep", {"ms": 60000}, call_timeout=0.05)
        self.assertEqual(slow.error_kind, pb.ERROR_KIND_TIMEOUT)
        self.assertIn("timed out after 50ms", toolwire.result_text(slow))

    def test_call_tool_malformed_call_is_an_rpc_error(self):
        with self.assertRaises(toolwire.ToolwireError) as cm:
            self.client.call_tool("echo", {"text": "hi"}, call_id="")
        assert_run_ending(self, cm.exception, grpc.StatusCode.INVALID_ARGUMENT)

    def test_watch_tools(self):
        rev = self.client.list_tools().revision
        stream = self.client.watch_tools()
        self.assertEqual(next(stream).revision, rev)
        stream.cancel()

    def test_token_needs_tls(self):
        with self.assertRaisesRegex(ValueError, "a token needs TLS"):
            toolwire.Client(ADDR, token="t")
        toolwire.Client(ADDR, token="t", insecure_token=True).close()


class AsyncTest(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self):
        need_server()
        self.client = toolwire.AsyncClient(ADDR)

    async def asyncTearDown(self):
        await self.client.close()

    async def test_call_tool(self):
        r = await self.client.call_tool("echo", {"text": "async"}, call_id="a1")
        self.assertEqual((r.call_id, r.is_error, toolwire.result_text(r)), ("a1", False, "async"))
        r = await self.client.call_tool("nope")
        self.assertEqual(r.error_kind, pb.ERROR_KIND_UNKNOWN_TOOL)

    async def test_cancelling_call_tool_cancels_the_call(self):
        call_id = f"py-cancel-{os.getpid()}-{time.time_ns()}"
        task = asyncio.create_task(self.client.call_tool("sleep", {"ms": 60000}, call_id=call_id))
        await asyncio.sleep(0.2)
        task.cancel()
        with self.assertRaises(asyncio.CancelledError):
            await task
        self.assertEqual(await server_outcome("", call_id), "cancelled")

    async def run_step(self, batcher):
        calls = toolwire.from_openai_tool_calls(STEP)
        return await asyncio.gather(*(batcher.execute(c) for c in calls))

    async def test_agent_step_is_one_batch(self):
        """A two-step scripted agent in OpenAI's format: the step's calls,
        gathered as a framework would, run as one batch with lanes, and the
        next request carries every result."""
        tools = toolwire.openai_tools((await self.client.list_tools()).tools)
        self.assertIn("sleep", [t["function"]["name"] for t in tools])
        seen = []
        batcher = toolwire.StepBatcher(self.client, on_batch=lambda a, ids: seen.append(a))
        messages = [{"role": "user", "content": "go"}, {"role": "assistant", "content": None, "tool_calls": STEP}]
        results = await self.run_step(batcher)
        messages += [toolwire.openai_tool_message(r) for r in results]
        self.assertEqual(len(seen), 1)
        self.assertEqual(lanes(seen[0]), STEP_LANES)
        self.assertEqual([m.get("tool_call_id") for m in messages[2:]], ["read_a", "read_b", "read_c", "write_d"])
        self.assertRegex(messages[2]["content"], r'^\{"slept_ms":2\d\d\}$')
        self.assertEqual([m["content"] for m in messages[4:]], ["gamma", "Error: disk full"])

    async def test_batcher_on_and_off(self):
        for enabled, want in [(True, 1), (False, 4)]:
            seen = []
            batcher = toolwire.StepBatcher(self.client, enabled=enabled, on_batch=lambda a, ids: seen.append(a))
            start = time.perf_counter()
            results = await self.run_step(batcher)
            ms = (time.perf_counter() - start) * 1000
            self.assertEqual([r.call_id for r in results], ["read_a", "read_b", "read_c", "write_d"])
            self.assertEqual(len(seen), want)
            print(f"\nbatcher {'on' if enabled else 'off'}: {len(seen)} batches {[lanes(a) for a in seen]}; step wall time {ms:.0f} ms")

    async def test_unknown_tool_is_text(self):
        r = await toolwire.StepBatcher(self.client).execute({"call_id": "g", "name": "search_web", "arguments": "{}"})
        self.assertEqual(r.error_kind, pb.ERROR_KIND_UNKNOWN_TOOL)
        self.assertTrue(toolwire.openai_tool_message(r)["content"].startswith('Error: unknown tool "search_web". Registered tools: echo'))

    async def test_failed_call_is_told_apart_from_its_text(self):
        """fail {"message": "boom"} and echo {"text": "boom"}: the model must
        see which one failed."""
        batcher = toolwire.StepBatcher(self.client)
        failed, echoed = await asyncio.gather(
            batcher.execute({"call_id": "failed", "name": "fail", "arguments": {"message": "boom"}}),
            batcher.execute({"call_id": "echoed", "name": "echo", "arguments": {"text": "boom"}}),
        )
        self.assertEqual(
            [toolwire.openai_tool_message(failed), toolwire.openai_tool_message(echoed)],
            [
                {"role": "tool", "tool_call_id": "failed", "content": "Error: boom"},
                {"role": "tool", "tool_call_id": "echoed", "content": "boom"},
            ],
        )
        self.assertEqual(
            [toolwire.anthropic_tool_result(failed), toolwire.anthropic_tool_result(echoed)],
            [
                {"type": "tool_result", "tool_use_id": "failed", "content": [{"type": "text", "text": "boom"}], "is_error": True},
                {"type": "tool_result", "tool_use_id": "echoed", "content": [{"type": "text", "text": "boom"}]},
            ],
        )
        self.assertEqual([toolwire.result_text(failed), toolwire.tool_message_text(failed)], ["boom", toolwire.ERROR_PREFIX + "boom"])

    async def test_progress_and_cancel(self):
        seen = []
        started = asyncio.Event()

        def progress(p):
            self.assertEqual(p.message, "sleeping 30000 ms")
            started.set()

        batcher = toolwire.StepBatcher(self.client, on_batch=lambda a, ids: seen.append(a))
        tasks = [
            asyncio.create_task(batcher.execute({"call_id": "nap", "name": "sleep", "arguments": {"ms": 30000}}, on_progress=progress)),
            asyncio.create_task(batcher.execute({"call_id": "nap2", "name": "sleep", "arguments": {"ms": 30000}})),
        ]
        await asyncio.wait_for(started.wait(), 10)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self.assertEqual(await server_outcome(seen[0].batch_id, "nap"), "cancelled")

    async def test_call_cancelled_in_the_window_is_not_sent(self):
        seen = []
        batcher = toolwire.StepBatcher(self.client, window=0.05, on_batch=lambda a, ids: seen.append(ids))
        dropped = asyncio.create_task(batcher.execute({"call_id": "a", "name": "sleep", "arguments": {"ms": 100}}))
        kept = asyncio.create_task(batcher.execute({"call_id": "b", "name": "echo", "arguments": {"text": "b"}}))
        await asyncio.sleep(0)  # both wait for the window
        dropped.cancel()
        self.assertEqual(toolwire.result_text(await kept), "b")
        self.assertEqual(seen, [["b"]])

    async def test_repeated_call_id_starts_a_new_batch(self):
        seen = []
        batcher = toolwire.StepBatcher(self.client, on_batch=lambda a, ids: seen.append(a))
        rs = await asyncio.gather(*(batcher.execute({"call_id": "x", "name": "echo", "arguments": {"text": t}}) for t in "12"))
        self.assertEqual([toolwire.result_text(r) for r in rs], ["1", "2"])
        self.assertEqual(len(seen), 2)


class UnreachableTest(unittest.IsolatedAsyncioTestCase):
    async def test_rpc_failure_reaches_every_caller(self):
        async with toolwire.AsyncClient("127.0.0.1:1") as client:  # nothing listens on port 1
            batcher = toolwire.StepBatcher(client)
            got = await asyncio.wait_for(
                asyncio.gather(*(batcher.execute({"call_id": i, "name": "echo"}) for i in "ab"), return_exceptions=True), 30
            )
        for e in got:
            assert_run_ending(self, e, grpc.StatusCode.UNAVAILABLE)


async def agent(client, listed, turns):
    """A scripted agent in OpenAI's format, the loop docs/frameworks.md
    shows: each turn's tool calls gathered through a StepBatcher, their tool
    messages appended, until a turn answers in text. Returns the messages and
    how many times the model was asked."""
    tools = toolwire.openai_tools(listed)
    messages = [{"role": "user", "content": "go"}]
    batcher = toolwire.StepBatcher(client)
    for asked, turn in enumerate(turns, 1):
        assert tools  # what the request would carry
        if isinstance(turn, str):
            messages.append({"role": "assistant", "content": turn})
            return messages, asked
        message = {"role": "assistant", "content": None, "tool_calls": turn}
        messages.append(message)
        try:
            results = await asyncio.gather(*(batcher.execute(c) for c in toolwire.from_openai_tool_calls(message["tool_calls"])))
        except toolwire.ToolwireError as e:
            e.asked = asked
            raise
        messages += [toolwire.openai_tool_message(r) for r in results]
    raise AssertionError("the script ended without an answer")


class RunEndingTest(unittest.IsolatedAsyncioTestCase):
    """What the runtime must fix ends the run with a ToolwireError, for the
    blocking client, the asyncio client and the agent loop on the batcher."""

    async def asyncSetUp(self):
        need_bin()
        async with toolwire.AsyncClient(ADDR) as client:
            self.listed = (await client.list_tools()).tools

    async def test_wrong_token(self):
        server = OwnServer(with_token=True)
        self.addCleanup(server.stop)
        with toolwire.Client(server.addr, token=WRONG_TOKEN, insecure_token=True) as client:
            with self.assertRaises(toolwire.ToolwireError) as caught:
                client.list_tools()
            assert_run_ending(self, caught.exception, grpc.StatusCode.UNAUTHENTICATED)
            self.assertEqual(str(caught.exception), "toolwire: UNAUTHENTICATED: invalid bearer token")
            self.assertEqual(caught.exception.details, "invalid bearer token")
            with self.assertRaises(toolwire.ToolwireError) as caught:
                client.call_tool("echo", {"text": "hi"})
            assert_run_ending(self, caught.exception, grpc.StatusCode.UNAUTHENTICATED)
        with toolwire.Client(server.addr, token=TOKEN, insecure_token=True) as client:
            self.assertEqual(toolwire.result_text(client.call_tool("echo", {"text": "hi"})), "hi")
        async with toolwire.AsyncClient(server.addr, token=WRONG_TOKEN, insecure_token=True) as client:
            with self.assertRaises(toolwire.ToolwireError) as caught:
                await client.list_tools()
            assert_run_ending(self, caught.exception, grpc.StatusCode.UNAUTHENTICATED)
            with self.assertRaises(toolwire.ToolwireError) as caught:
                await agent(client, self.listed, [STEP, "never"])
            assert_run_ending(self, caught.exception, grpc.StatusCode.UNAUTHENTICATED)
            self.assertEqual(caught.exception.asked, 1, "the model was asked again after the RPC failed")

    async def test_stopped_server(self):
        server = OwnServer()
        self.addCleanup(server.stop)
        async with toolwire.AsyncClient(server.addr) as client:
            await client.list_tools()  # the client has talked to it
            server.stop()
            with self.assertRaises(toolwire.ToolwireError) as caught:
                await asyncio.wait_for(agent(client, self.listed, [STEP, "never"]), 30)
            assert_run_ending(self, caught.exception, grpc.StatusCode.UNAVAILABLE)
            self.assertEqual(caught.exception.asked, 1)
            with self.assertRaises(toolwire.ToolwireError) as caught:
                async for _ in client.execute_batch([{"call_id": "a", "name": "echo"}]):
                    pass
            assert_run_ending(self, caught.exception, grpc.StatusCode.UNAVAILABLE)
        with toolwire.Client(server.addr) as client:
            with self.assertRaises(toolwire.ToolwireError) as caught:
                client.collect(client.execute_batch([{"call_id": "a", "name": "echo"}]))
            assert_run_ending(self, caught.exception, grpc.StatusCode.UNAVAILABLE)

    async def test_rate_limited(self):
        # STEP's 4 calls at once, then one every 10 s: the first batch spends
        # the allowance, and the client does not wait.
        server = OwnServer(args=["--rate-per-caller", "0.1", "--rate-burst", "4"])
        self.addCleanup(server.stop)
        async with toolwire.AsyncClient(server.addr, rate_limit_retries=0) as client:
            await client.collect(client.execute_batch([{"call_id": c["id"], "name": "echo"} for c in STEP]))
            with self.assertRaises(toolwire.ToolwireError) as caught:
                await agent(client, self.listed, [STEP, "never"])
            assert_refusal(self, caught.exception)
            self.assertEqual(caught.exception.asked, 1)

    def test_malformed_batch(self):
        with toolwire.Client(ADDR) as client:
            with self.assertRaises(toolwire.ToolwireError) as caught:
                client.collect(client.execute_batch([]))
            assert_run_ending(self, caught.exception, grpc.StatusCode.INVALID_ARGUMENT)


RATE_LIMIT = ["--rate-per-caller", "5", "--rate-burst", "1"]


def drain(test, hasty):
    """Calls with a client without retries until the allowance is spent (a
    refusal comes back) and returns the refusal. Every client of these tests
    is the anonymous caller: they share one allowance."""
    for _ in range(50):
        try:
            hasty.call_tool("echo", {"text": "drain"})
        except toolwire.ToolwireError as e:
            test.assertEqual(e.code, grpc.StatusCode.RESOURCE_EXHAUSTED, str(e))
            return e
    raise AssertionError("50 calls in a row were let through: is the server rate limited?")


def assert_refusal(test, err):
    """err is a rate limit's refusal, its delay readable."""
    assert_run_ending(test, err, grpc.StatusCode.RESOURCE_EXHAUSTED)
    test.assertTrue(err.details.startswith("rate limit: "), err.details)
    test.assertIsNotNone(err.retry_delay)
    test.assertGreater(err.retry_delay, 0)
    test.assertEqual(toolwire.retry_delay(err), err.retry_delay)
    test.assertEqual(toolwire.retry_delay(err.__cause__), err.retry_delay)  # grpc's error, from its trailer


class RateLimitTest(unittest.TestCase):
    """A server started with --rate-per-caller 5 --rate-burst 1 refuses
    past the allowance with RESOURCE_EXHAUSTED and a RetryInfo: the blocking
    client waits it out, or raises the refusal with its delay."""

    @classmethod
    def setUpClass(cls):
        need_bin()
        cls.server = OwnServer(args=RATE_LIMIT)
        cls.hasty = toolwire.Client(cls.server.addr, rate_limit_retries=0)

    @classmethod
    def tearDownClass(cls):
        cls.hasty.close()
        cls.server.stop()

    def test_without_retries_the_refusal_has_its_delay(self):
        assert_refusal(self, drain(self, self.hasty))
        drain(self, self.hasty)
        with self.assertRaises(toolwire.ToolwireError) as caught:
            self.hasty.collect(self.hasty.execute_batch([{"call_id": "a", "name": "echo"}]))
        assert_refusal(self, caught.exception)
        self.assertIsNone(toolwire.retry_delay(ValueError("other")))
        self.assertIsNone(toolwire.ToolwireError(grpc.StatusCode.UNAVAILABLE, "down").retry_delay)

    def test_consecutive_calls_wait_and_succeed(self):
        self.assertEqual(toolwire.DEFAULT_RATE_LIMIT_RETRIES, 3)
        waits = []
        with toolwire.Client(self.server.addr, on_rate_limit=lambda e, d: waits.append((e.code, d))) as patient:
            drain(self, self.hasty)
            for text in ["one", "two", "three"]:
                self.assertEqual(toolwire.result_text(patient.call_tool("echo", {"text": text})), text)
            drain(self, self.hasty)
            batch = patient.collect(patient.execute_batch([{"call_id": "b", "name": "echo", "arguments": {"text": "batch"}}]))
            self.assertEqual(toolwire.result_text(batch.results[0]), "batch")
        self.assertGreaterEqual(len(waits), 2, waits)  # after each drain at least
        self.assertTrue(all(code == grpc.StatusCode.RESOURCE_EXHAUSTED and d > 0 for code, d in waits), waits)

    def test_cancel_ends_the_wait(self):
        streams = []
        # Cancels as the wait begins: were the wait not ended, the retry would succeed.
        with toolwire.Client(self.server.addr, on_rate_limit=lambda e, d: streams[0].cancel()) as client:
            drain(self, self.hasty)
            streams.append(client.execute_batch([{"call_id": "c", "name": "echo"}]))
            with self.assertRaises(toolwire.ToolwireError) as caught:
                client.collect(streams[0])
            assert_refusal(self, caught.exception)


class RateLimitDeadlineTest(unittest.IsolatedAsyncioTestCase):
    """A timeout shorter than the delay: the refusal comes back at once
    (serve --rate-per-caller 0.1 --rate-burst 1: one call every 10 s)."""

    def setUp(self):
        need_bin()
        self.server = OwnServer(args=["--rate-per-caller", "0.1", "--rate-burst", "1"])
        self.addCleanup(self.server.stop)

    async def test_refused_at_once(self):
        waits = []
        with toolwire.Client(self.server.addr, on_rate_limit=lambda e, d: waits.append(d)) as client:
            client.call_tool("echo", {"text": "first"})  # the allowance
            with self.assertRaises(toolwire.ToolwireError) as caught:
                client.call_tool("echo", {"text": "x"}, timeout=5)
            assert_refusal(self, caught.exception)
            with self.assertRaises(toolwire.ToolwireError) as caught:
                client.collect(client.execute_batch([{"call_id": "y", "name": "echo"}], timeout=5))
            assert_refusal(self, caught.exception)
        async with toolwire.AsyncClient(self.server.addr, on_rate_limit=lambda e, d: waits.append(d)) as client:
            with self.assertRaises(toolwire.ToolwireError) as caught:
                await client.call_tool("echo", {"text": "x"}, timeout=5)
            assert_refusal(self, caught.exception)
            with self.assertRaises(toolwire.ToolwireError) as caught:
                await client.collect(client.execute_batch([{"call_id": "y", "name": "echo"}], timeout=5))
            assert_refusal(self, caught.exception)
        self.assertEqual(waits, [])


class AsyncRateLimitTest(unittest.IsolatedAsyncioTestCase):
    """RateLimitTest for AsyncClient and the StepBatcher."""

    @classmethod
    def setUpClass(cls):
        need_bin()
        cls.server = OwnServer(args=RATE_LIMIT)
        cls.hasty = toolwire.Client(cls.server.addr, rate_limit_retries=0)

    @classmethod
    def tearDownClass(cls):
        cls.hasty.close()
        cls.server.stop()

    async def test_without_retries(self):
        async with toolwire.AsyncClient(self.server.addr, rate_limit_retries=0) as client:
            drain(self, self.hasty)
            with self.assertRaises(toolwire.ToolwireError) as caught:
                await client.call_tool("echo")
            assert_refusal(self, caught.exception)
            drain(self, self.hasty)
            with self.assertRaises(toolwire.ToolwireError) as caught:
                await toolwire.StepBatcher(client).execute({"call_id": "s", "name": "echo"})
            assert_refusal(self, caught.exception)

    async def test_calls_and_steps_wait_and_succeed(self):
        waits = []
        async with toolwire.AsyncClient(self.server.addr, on_rate_limit=lambda e, d: waits.append(d)) as client:
            drain(self, self.hasty)
            for text in ["one", "two"]:
                self.assertEqual(toolwire.result_text(await client.call_tool("echo", {"text": text})), text)
            drain(self, self.hasty)
            batch = await client.collect(client.execute_batch([{"call_id": "b", "name": "echo", "arguments": {"text": "batch"}}]))
            self.assertEqual(toolwire.result_text(batch.results[0]), "batch")
            drain(self, self.hasty)
            r = await toolwire.StepBatcher(client).execute({"call_id": "s", "name": "echo", "arguments": {"text": "step"}})
            self.assertEqual(toolwire.result_text(r), "step")
        self.assertGreaterEqual(len(waits), 3, waits)

    async def test_cancelling_ends_the_wait(self):
        tasks = []
        # Cancels as the wait begins: were the wait not ended, the retry would succeed.
        async with toolwire.AsyncClient(self.server.addr, on_rate_limit=lambda e, d: tasks[-1].cancel()) as client:
            for run in (lambda: client.call_tool("echo"), lambda: toolwire.StepBatcher(client).execute({"call_id": "s", "name": "echo"})):
                drain(self, self.hasty)
                tasks.append(asyncio.create_task(run()))
                with self.assertRaises(asyncio.CancelledError):
                    await tasks[-1]
        streams = []
        async with toolwire.AsyncClient(self.server.addr, on_rate_limit=lambda e, d: streams[0].cancel()) as client:
            drain(self, self.hasty)
            streams.append(client.execute_batch([{"call_id": "c", "name": "echo"}]))
            with self.assertRaises(toolwire.ToolwireError) as caught:
                await client.collect(streams[0])
            assert_refusal(self, caught.exception)


class AdapterTest(unittest.TestCase):
    def test_openai(self):
        calls = toolwire.from_openai_tool_calls(
            [{"id": "a", "type": "function", "function": {"name": "echo", "arguments": '{"text":"hi"}'}}, {"id": "b", "function": {"name": "sleep", "arguments": {"ms": 5}}}]
        )
        self.assertEqual(calls, [{"call_id": "a", "name": "echo", "arguments": '{"text":"hi"}'}, {"call_id": "b", "name": "sleep", "arguments": '{"ms": 5}'}])
        with self.assertRaisesRegex(ValueError, "not supported"):
            toolwire.from_openai_tool_calls([{"id": "x", "type": "custom", "function": {"name": "y"}}])
        t = toolwire.openai_tools([pb.Tool(name="t", description="d")])
        self.assertEqual(t, [{"type": "function", "function": {"name": "t", "description": "d", "parameters": {"type": "object", "properties": {}}}}])

    def test_anthropic(self):
        tools = toolwire.anthropic_tools([pb.Tool(name="u", description="d", input_schema='{"type":"object","required":["x"]}')])
        self.assertEqual(tools, [{"name": "u", "description": "d", "input_schema": {"type": "object", "required": ["x"]}}])
        calls = toolwire.from_anthropic_tool_uses([{"type": "text", "text": "let me"}, {"type": "tool_use", "id": "tu1", "name": "echo", "input": {"text": "hi"}}])
        self.assertEqual(calls, [{"call_id": "tu1", "name": "echo", "arguments": '{"text": "hi"}'}])
        r = pb.CallResult(call_id="tu1", is_error=True, content=[pb.Content(text=pb.TextContent(text="bad")), pb.Content(image=pb.ImageContent(data=b"\x89PNG", mime_type="image/png"))])
        self.assertEqual(
            toolwire.anthropic_tool_result(r),
            {
                "type": "tool_result",
                "tool_use_id": "tu1",
                "content": [{"type": "text", "text": "bad"}, {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw=="}}],
                "is_error": True,
            },
        )
        empty = pb.CallResult(call_id="tu2", content=[pb.Content(text=pb.TextContent(text="")), pb.Content(text=pb.TextContent(text="ok")), pb.Content(text=pb.TextContent())])
        self.assertEqual(toolwire.anthropic_tool_result(empty), {"type": "tool_result", "tool_use_id": "tu2", "content": [{"type": "text", "text": "ok"}]})
        self.assertEqual(toolwire.anthropic_tool_result(pb.CallResult(call_id="tu3", content=[pb.Content(text=pb.TextContent())]))["content"], [])
        self.assertEqual(
            toolwire.openai_tool_message(r)["content"], "Error: bad\n[image (image/png, 4 bytes) left out: tool messages carry text only]"
        )


if __name__ == "__main__":
    unittest.main()


class _CutProxy:
    """A TCP proxy to target whose connections cut() closes."""

    def __init__(self, target):
        import socket
        import threading

        self.target = target.rsplit(":", 1)
        self.lis = socket.create_server(("127.0.0.1", 0))
        self.addr = "127.0.0.1:%d" % self.lis.getsockname()[1]
        self.lock = threading.Lock()
        self.socks = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        import socket
        import threading

        while True:
            try:
                down, _ = self.lis.accept()
            except OSError:
                return
            try:
                up = socket.create_connection((self.target[0], int(self.target[1])))
            except OSError:
                down.close()
                continue
            with self.lock:
                self.socks += [down, up]
            for a, b in ((down, up), (up, down)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(a, b):
        try:
            while data := a.recv(65536):
                b.sendall(data)
        except OSError:
            pass
        finally:
            for s in (a, b):
                try:
                    s.close()
                except OSError:
                    pass

    def cut(self):
        import socket

        with self.lock:
            for s in self.socks:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()
            self.socks = []

    def close(self):
        self.lis.close()
        self.cut()


class AttachTest(unittest.TestCase):
    def test_reattach_through_three_cuts(self):
        need_bin()
        server = OwnServer()
        proxy = _CutProxy(server.addr)
        try:
            with toolwire.Client(proxy.addr, reattach=(10, 0.02)) as client:
                calls = [{"call_id": c, "name": "sleep", "arguments": {"ms": 700}} for c in "abc"]
                opts = toolwire.pb.BatchOptions(detach=True, sequential=True)
                events, cuts = [], 0
                for ev in client.execute_batch(calls, options=opts):
                    events.append(ev)
                    if cuts < 3 and len(events) in (3, 15, 30):
                        proxy.cut()
                        cuts += 1
                self.assertEqual(cuts, 3, f"{len(events)} events")
                self.assertEqual([ev.seq for ev in events], list(range(1, len(events) + 1)))
                self.assertEqual(events[-1].finished.succeeded, 3)
                again = list(client.attach_batch(events[0].accepted.batch_id, 1))
                self.assertEqual(len(again), len(events) - 1)
                self.assertEqual(again[0].seq, 2)
                with self.assertRaises(toolwire.ToolwireError) as cm:
                    list(client.attach_batch("nope"))
                self.assertEqual(cm.exception.code, grpc.StatusCode.NOT_FOUND)
        finally:
            proxy.close()
            server.stop()


class AsyncAttachTest(unittest.IsolatedAsyncioTestCase):
    async def test_reattach_through_a_cut(self):
        need_bin()
        server = OwnServer()
        proxy = _CutProxy(server.addr)
        try:
            async with toolwire.AsyncClient(proxy.addr, reattach=(10, 0.02)) as client:
                calls = [{"call_id": c, "name": "sleep", "arguments": {"ms": 500}} for c in "ab"]
                opts = toolwire.pb.BatchOptions(detach=True, sequential=True)
                events, cut = [], False
                async for ev in client.execute_batch(calls, options=opts):
                    events.append(ev)
                    if not cut and len(events) == 5:
                        proxy.cut()
                        cut = True
                self.assertTrue(cut)
                self.assertEqual([ev.seq for ev in events], list(range(1, len(events) + 1)))
                self.assertEqual(events[-1].finished.succeeded, 2)
                again = [ev async for ev in client.attach_batch(events[0].accepted.batch_id, 1)]
                self.assertEqual(again[0].seq, 2)
        finally:
            proxy.close()
            server.stop()
