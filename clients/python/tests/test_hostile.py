"""The clients against servers in this process that break the contract:
listings that never end, a resumed stream whose events come again or out
of order, a stream held open after its last event, a re-attach refused
for ever, an event larger than the client receives. None needs a toolwire
server."""

import asyncio
import threading
import time
import unittest
from concurrent import futures

import grpc

import toolwire
from toolwire import pb

from test_streams import DETACH, BatchServer, accepted, finished, refuse_with_retry_info, result

DESC = "d" * 1000


class FakeService:
    """A ToolService in this process answering with the handlers given to
    serve, until the with block it opens ends."""

    def serve(self, handlers, workers):
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=workers))
        self.server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("toolwire.v1.ToolService", handlers),))
        self.addr = f"127.0.0.1:{self.server.add_insecure_port('127.0.0.1:0')}"
        self.server.start()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.server.stop(None).wait()


class ListServer(FakeService):
    """A ToolService in this process whose ListTools answers page(n) for
    its nth call (from 1)."""

    def __init__(self, page):
        self.calls = 0
        lock = threading.Lock()

        def list_tools(request, context):
            with lock:
                self.calls += 1
                n = self.calls
            return page(n)

        handlers = {"ListTools": grpc.unary_unary_rpc_method_handler(
            list_tools,
            request_deserializer=pb.ListToolsRequest.FromString,
            response_serializer=pb.ListToolsResponse.SerializeToString,
        )}
        self.serve(handlers, workers=4)


def pages(tools, same_token=False):
    """Pages of tools tools each that never end, each going on from the
    last, with a new token unless same_token."""
    def page(n):
        resp = pb.ListToolsResponse(revision="r", next_page_token="more" if same_token else f"p{n}")
        for i in range(tools):
            resp.tools.add(name=f"t{n:09d}-{i:04d}", description=DESC)
        return resp
    return page


LIST_CASES = (
    # name, page, list_tools kwargs, most calls, what the error says
    ("pages of 1 MB", pages(1000), {}, 66, "more than 64 MiB"),
    ("small pages", pages(1), {"max_pages": 100}, 100, "read 100 pages"),
    ("a token twice", pages(1, same_token=True), {}, 2, "token it named before"),
)


class EndlessListTest(unittest.TestCase):
    """list_tools stops at its bounds against pages that never end."""

    def check(self, list_tools):
        for name, page, kwargs, most, says in LIST_CASES:
            with self.subTest(name), ListServer(page) as server:
                with self.assertRaises(toolwire.ToolwireError) as cm:
                    list_tools(server.addr, kwargs)
                self.assertIn(says, str(cm.exception))
                self.assertLessEqual(server.calls, most)

    def test_sync(self):
        def run(addr, kwargs):
            with toolwire.Client(addr) as client:
                client.list_tools(timeout=20, **kwargs)

        self.check(run)

    def test_async(self):
        async def run(addr, kwargs):
            async with toolwire.AsyncClient(addr) as client:
                await client.list_tools(timeout=20, **kwargs)

        loop = asyncio.new_event_loop()
        try:
            self.check(lambda addr, kwargs: loop.run_until_complete(run(addr, kwargs)))
        finally:
            loop.close()


FIRST = (accepted(1, "a", "b", "c"), result(2, "a", 0))
RESUMED_CASES = (
    # name, AttachBatch's first answer, seqs yielded, what the error says
    ("events again", (*FIRST, result(3, "b", 1), result(2, "a", 0), result(4, "c", 2), finished(5)), [1, 2, 3, 4, 5], None),
    ("out of order", (result(4, "c", 2), result(3, "b", 1), finished(5)), [1, 2], "seq 4"),
    ("an event skipped", (result(3, "b", 1), finished(5)), [1, 2, 3], "seq 5"),
    ("unnumbered", (result(0, "b", 1), result(3, "b", 1)), [1, 2], "seq 0"),
)
CALLS3 = [{"call_id": c, "name": "x"} for c in "abc"]


def resumed_server(resumed):
    def execute(req, ctx, n):
        yield from FIRST
        ctx.abort(grpc.StatusCode.UNAVAILABLE, "cut")

    def attach(req, ctx, n):
        if n == 1:
            yield from resumed
        ctx.abort(grpc.StatusCode.UNAVAILABLE, "cut again")

    return BatchServer(execute, attach)


def pre_durable_server(cut):
    """A server from before durable batches: its events are unnumbered, it
    knows no detach (the batch is a plain one), and it has no AttachBatch."""
    def execute(req, ctx, n):
        yield accepted(0, "a")
        if cut:
            ctx.abort(grpc.StatusCode.UNAVAILABLE, "cut")
        yield result(0, "a", 0)
        yield finished(0)

    def attach(req, ctx, n):
        ctx.abort(grpc.StatusCode.UNIMPLEMENTED, "unknown method AttachBatch")
        yield  # a generator, as the handler must be

    return BatchServer(execute, attach)


class PreDurableServerTest(unittest.TestCase):
    """In a rolling upgrade from a version before durable batches, a
    detached batch that reaches an old replica is a plain one there: its
    unnumbered events are yielded, and a cut stream is the error, with no
    re-attach, where the client raised "seq 0 after seq 0" at the first
    event (closing the stream, so cancelling the batch there)."""

    def check(self, drain):
        for cut in (False, True):
            with self.subTest(cut=cut), pre_durable_server(cut) as server:
                n, err = drain(server.addr)
                if cut:
                    self.assertEqual((n, err.code if err else None), (1, grpc.StatusCode.UNAVAILABLE))
                else:
                    self.assertEqual((n, err), (3, None))
                self.assertEqual(server.attaches, 0)

    def test_sync(self):
        def drain(addr):
            n = 0
            with toolwire.Client(addr, reattach=(3, 0.001)) as client:
                try:
                    for _ in client.execute_batch([{"call_id": "a", "name": "x"}], options=DETACH, timeout=20):
                        n += 1
                except toolwire.ToolwireError as e:
                    return n, e
            return n, None

        self.check(drain)

    def test_async(self):
        async def drain(addr):
            n = 0
            async with toolwire.AsyncClient(addr, reattach=(3, 0.001)) as client:
                try:
                    async for _ in client.execute_batch([{"call_id": "a", "name": "x"}], options=DETACH, timeout=20):
                        n += 1
                except toolwire.ToolwireError as e:
                    return n, e
            return n, None

        loop = asyncio.new_event_loop()
        try:
            self.check(lambda addr: loop.run_until_complete(drain(addr)))
        finally:
            loop.close()


class CallToolWithoutItTest(unittest.TestCase):
    """In a rolling upgrade from a version before CallTool, an old replica
    answers it UNIMPLEMENTED: call_tool sends the call as a batch of one,
    where it raised that."""

    def test_sync_and_async(self):
        sent = []

        def execute(req, ctx, n):
            sent.append((req.calls[0].call_id, req.session_id))
            yield accepted(1, "c1")
            yield result(2, "c1", 0, "done")
            yield finished(3)

        async def run_async(addr):
            async with toolwire.AsyncClient(addr) as client:
                return await client.call_tool("x", call_id="c1", session_id="s1", timeout=20)

        with BatchServer(execute) as server:
            with toolwire.Client(server.addr) as client:
                r = client.call_tool("x", call_id="c1", session_id="s1", timeout=20)
            self.assertEqual((r.call_id, r.content[0].text.text), ("c1", "done"))
            r = asyncio.run(run_async(server.addr))
            self.assertEqual((r.call_id, r.content[0].text.text), ("c1", "done"))
        self.assertEqual(sent, [("c1", "s1"), ("c1", "s1")])


class ResumedOrderTest(unittest.TestCase):
    """A resumed stream yields each seq once, in order, or raises."""

    def check(self, drain):
        for name, resumed, want, says in RESUMED_CASES:
            with self.subTest(name), resumed_server(resumed) as server:
                seqs, err = drain(server.addr)
                self.assertEqual(seqs, want)
                if says is None:
                    self.assertIsNone(err)
                else:
                    self.assertIsNotNone(err, "no error")
                    self.assertEqual(err.code, grpc.StatusCode.INTERNAL, str(err))
                    self.assertIn(says, str(err))

    def test_sync(self):
        def drain(addr):
            seqs = []
            with toolwire.Client(addr, reattach=(3, 0.001)) as client:
                try:
                    for ev in client.execute_batch(CALLS3, options=DETACH, timeout=20):
                        seqs.append(ev.seq)
                except toolwire.ToolwireError as e:
                    return seqs, e
            return seqs, None

        self.check(drain)

    def test_async(self):
        async def drain(addr):
            seqs = []
            async with toolwire.AsyncClient(addr, reattach=(3, 0.001)) as client:
                try:
                    async for ev in client.execute_batch(CALLS3, options=DETACH, timeout=20):
                        seqs.append(ev.seq)
                except toolwire.ToolwireError as e:
                    return seqs, e
            return seqs, None

        # One event loop for every case: grpc.aio keeps to the loop it
        # first ran on.
        loop = asyncio.new_event_loop()
        try:
            self.check(lambda addr: loop.run_until_complete(drain(addr)))
        finally:
            loop.close()


def held_open(ended):
    """ExecuteBatch and AttachBatch that send a whole batch, then hold the
    stream open until the client lets go (then set ended)."""
    def stream(req, ctx, n):
        yield accepted(1, "a")
        yield result(2, "a", 0, "A")
        yield finished(3)
        while ctx.is_active():
            time.sleep(0.01)
        ended.set()

    return BatchServer(stream, stream)


class HeldOpenTest(unittest.TestCase):
    """A batch's stream ends at BatchFinished: a server that holds it open
    after it does not hold collect, and the RPC is let go."""

    def test_sync(self):
        for name, reattach, options in (("plain", None, None), ("detached, reattaching", (3, 0.01), DETACH)):
            ended = threading.Event()
            with self.subTest(name), held_open(ended) as server, toolwire.Client(server.addr, reattach=reattach) as client:
                batch = client.collect(client.execute_batch([{"call_id": "a", "name": "x"}], options=options, timeout=10))
                self.assertEqual(toolwire.result_text(batch.results[0]), "A")
                self.assertTrue(ended.wait(5), "the stream held open after BatchFinished is still open")

    def test_async(self):
        async def run(addr, reattach, options):
            async with toolwire.AsyncClient(addr, reattach=reattach) as client:
                return await client.collect(client.execute_batch([{"call_id": "a", "name": "x"}], options=options, timeout=10))

        loop = asyncio.new_event_loop()
        try:
            for name, reattach, options in (("plain", None, None), ("detached, reattaching", (3, 0.01), DETACH)):
                ended = threading.Event()
                with self.subTest(name), held_open(ended) as server:
                    batch = loop.run_until_complete(run(server.addr, reattach, options))
                    self.assertEqual(toolwire.result_text(batch.results[0]), "A")
                    self.assertTrue(ended.wait(5), "the stream held open after BatchFinished is still open")
        finally:
            loop.close()


class GiveUpTest(unittest.TestCase):
    """Re-attaching stops after its attempts against a server that answers
    every AttachBatch with UNAVAILABLE."""

    def test_sync(self):
        def execute(req, ctx, n):
            yield accepted(1, "a")
            ctx.abort(grpc.StatusCode.UNAVAILABLE, "cut")

        def attach(req, ctx, n):
            ctx.abort(grpc.StatusCode.UNAVAILABLE, "still cut")
            yield

        with BatchServer(execute, attach) as server, toolwire.Client(server.addr, reattach=(4, 0.001)) as client:
            seqs = []
            with self.assertRaises(toolwire.ToolwireError) as cm:
                for ev in client.execute_batch([{"call_id": "a", "name": "x"}], options=DETACH, timeout=20):
                    seqs.append(ev.seq)
            self.assertEqual(cm.exception.code, grpc.StatusCode.UNAVAILABLE)
            self.assertEqual(seqs, [1])
            self.assertEqual(server.attaches, 4)


class LargeEventTest(unittest.TestCase):
    """An event of 100 MB is refused by the receive limit, not read."""

    def test_sync(self):
        def execute(req, ctx, n):
            yield accepted(1, "a")
            yield result(2, "a", 0, "x" * (100 << 20))

        with BatchServer(execute) as server, toolwire.Client(server.addr) as client:
            seqs = []
            with self.assertRaises(toolwire.ToolwireError) as cm:
                for ev in client.execute_batch([{"call_id": "a", "name": "x"}], timeout=20):
                    seqs.append(ev.seq)
            self.assertEqual(cm.exception.code, grpc.StatusCode.RESOURCE_EXHAUSTED, str(cm.exception))
            self.assertEqual(seqs, [1])


class RetryDelayOfDaysTest(unittest.TestCase):
    """A refusal whose RetryInfo says to wait 30 days is raised at once,
    its delay in retry_delay, rather than waited out (for ever without a
    timeout)."""

    DAYS = 30 * 24 * 3600

    def test_sync(self):
        def execute(req, ctx, n):
            refuse_with_retry_info(ctx, self.DAYS * 1000)
            yield

        with BatchServer(execute) as server, toolwire.Client(server.addr) as client:
            got = []

            def run():
                try:
                    list(client.execute_batch([{"call_id": "a", "name": "x"}]))
                except toolwire.ToolwireError as e:
                    got.append(e)

            t = threading.Thread(target=run, daemon=True)  # a wait of 30 days must not hold the tests' exit
            t.start()
            t.join(10)
            self.assertFalse(t.is_alive(), "waiting for the server's 30 days")
            self.assertEqual(got[0].code, grpc.StatusCode.RESOURCE_EXHAUSTED)
            self.assertEqual(got[0].retry_delay, self.DAYS)
            self.assertEqual(server.executes, 1)

    def test_async(self):
        def execute(req, ctx, n):
            refuse_with_retry_info(ctx, self.DAYS * 1000)
            yield

        async def run(addr):
            async with toolwire.AsyncClient(addr) as client:
                with self.assertRaises(toolwire.ToolwireError) as cm:
                    await asyncio.wait_for(client.collect(client.execute_batch([{"call_id": "a", "name": "x"}])), 10)
                return cm.exception

        with BatchServer(execute) as server:
            err = asyncio.run(run(server.addr))
            self.assertEqual(err.code, grpc.StatusCode.RESOURCE_EXHAUSTED)
            self.assertEqual(err.retry_delay, self.DAYS)
            self.assertEqual(server.executes, 1)


class CallServer(FakeService):
    """A ToolService in this process whose CallTool answers resp."""

    def __init__(self, resp):
        handlers = {"CallTool": grpc.unary_unary_rpc_method_handler(
            lambda request, context: resp,
            request_deserializer=pb.CallToolRequest.FromString,
            response_serializer=pb.CallToolResponse.SerializeToString,
        )}
        self.serve(handlers, workers=2)


CALL_CASES = (
    ("no result", pb.CallToolResponse(), "returned no result"),
    ("another call's", pb.CallToolResponse(result=pb.CallResult(call_id="other", content=[pb.Content(text=pb.TextContent(text="hi"))])),
     'returned the result of call "other"'),
)


class CallToolAnswersItsCallTest(unittest.TestCase):
    """call_tool's result is its call's: a response without one, or with
    another call's, raises INTERNAL rather than being an empty success or
    an answer the runtime would hand its model for another call."""

    def test_sync_and_async(self):
        async def acall(addr):
            async with toolwire.AsyncClient(addr) as client:
                return await client.call_tool("x", call_id="a", timeout=20)

        loop = asyncio.new_event_loop()
        try:
            for name, resp, says in CALL_CASES:
                with CallServer(resp) as server, toolwire.Client(server.addr) as client:
                    for how, call in (("sync", lambda: client.call_tool("x", call_id="a", timeout=20)),
                                      ("async", lambda: loop.run_until_complete(acall(server.addr)))):
                        with self.subTest(f"{name}, {how}"):
                            with self.assertRaises(toolwire.ToolwireError) as cm:
                                call()
                            self.assertEqual(cm.exception.code, grpc.StatusCode.INTERNAL)
                            self.assertIn(says, str(cm.exception))
        finally:
            loop.close()


class QuietEndTest(unittest.TestCase):
    """A detached batch's stream that a server ends as if done, before
    BatchFinished, is re-attached from the last seq; a re-attach that
    brings nothing ends the stream (as attach_batch from the last seq)."""

    def server(self):
        def execute(req, ctx, n):
            yield accepted(1, "a")
            yield result(2, "a", 0, "A")  # and ends as if done

        def attach(req, ctx, n):
            self.afters.append(req.after_seq)
            if n == 1 and req.after_seq == 2:
                yield finished(3)

        self.afters = []
        return BatchServer(execute, attach)

    def test_sync(self):
        with self.server() as server, toolwire.Client(server.addr, reattach=(3, 0.001)) as client:
            batch = client.collect(client.execute_batch([{"call_id": "a", "name": "x"}], options=DETACH, timeout=20))
            self.assertEqual(toolwire.result_text(batch.results[0]), "A")
            self.assertEqual(self.afters, [2])
            self.assertEqual(list(client.attach_batch("b1", 3, timeout=20)), [])
            self.assertEqual(self.afters, [2, 3])

    def test_async(self):
        async def run(addr):
            async with toolwire.AsyncClient(addr, reattach=(3, 0.001)) as client:
                batch = await client.collect(client.execute_batch([{"call_id": "a", "name": "x"}], options=DETACH, timeout=20))
                rest = [ev async for ev in client.attach_batch("b1", 3, timeout=20)]
                return batch, rest

        with self.server() as server:
            batch, rest = asyncio.run(run(server.addr))
            self.assertEqual(toolwire.result_text(batch.results[0]), "A")
            self.assertEqual(rest, [])
            self.assertEqual(self.afters, [2, 3])


if __name__ == "__main__":
    unittest.main()
