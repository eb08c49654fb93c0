"""A batch's stream against servers in this process that do what a real
server does only when something breaks: connections that die silently,
streams that drop, end early or say too much."""

import asyncio
import socket
import threading
import time
import unittest
from concurrent import futures
from unittest import mock

import grpc

import toolwire
from toolwire import pb


class BatchServer:
    """A ToolService in this process whose ExecuteBatch and AttachBatch are
    execute(request, context, n) and attach(request, context, n),
    generators of events for their nth call (from 1). The server answers
    pings however often they come."""

    def __init__(self, execute=None, attach=None):
        self.executes = 0
        self.attaches = 0
        self._lock = threading.Lock()

        def counted(name, fn):
            def handler(request, context):
                with self._lock:
                    setattr(self, name, getattr(self, name) + 1)
                    n = getattr(self, name)
                yield from fn(request, context, n)
            return handler

        handlers = {}
        if execute:
            handlers["ExecuteBatch"] = grpc.unary_stream_rpc_method_handler(
                counted("executes", execute),
                request_deserializer=pb.ExecuteBatchRequest.FromString,
                response_serializer=pb.ExecuteBatchResponse.SerializeToString,
            )
        if attach:
            handlers["AttachBatch"] = grpc.unary_stream_rpc_method_handler(
                counted("attaches", attach),
                request_deserializer=pb.AttachBatchRequest.FromString,
                response_serializer=pb.ExecuteBatchResponse.SerializeToString,
            )
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=8), options=[
            ("grpc.http2.min_ping_interval_without_data_ms", 10),
            ("grpc.http2.max_ping_strikes", 0),
        ])
        self.server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("toolwire.v1.ToolService", handlers),))
        self.addr = f"127.0.0.1:{self.server.add_insecure_port('127.0.0.1:0')}"
        self.server.start()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.server.stop(None).wait()


class FreezeProxy:
    """A TCP proxy to target; freeze() stops forwarding on the connections
    open now without closing them, as a connection that died silently
    (later connections are forwarded)."""

    def __init__(self, target):
        host, port = target.rsplit(":", 1)
        self.target = (host, int(port))
        self.lis = socket.create_server(("127.0.0.1", 0))
        self.addr = "127.0.0.1:%d" % self.lis.getsockname()[1]
        self.lock = threading.Lock()
        self.conns = []  # (down, up, frozen event)
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                down, _ = self.lis.accept()
            except OSError:
                return
            try:
                up = socket.create_connection(self.target)
            except OSError:
                down.close()
                continue
            frozen = threading.Event()
            with self.lock:
                self.conns.append((down, up, frozen))
            for a, b in ((down, up), (up, down)):
                threading.Thread(target=self._pipe, args=(a, b, frozen), daemon=True).start()

    @staticmethod
    def _pipe(a, b, frozen):
        try:
            while data := a.recv(65536):
                if not frozen.is_set():
                    b.sendall(data)
        except OSError:
            pass

    def freeze(self):
        with self.lock:
            for _, _, frozen in self.conns:
                frozen.set()

    def close(self):
        self.lis.close()
        with self.lock:
            for down, up, _ in self.conns:
                for s in (down, up):
                    try:
                        s.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
                    s.close()


def event(seq=0, **kw):
    return pb.ExecuteBatchResponse(seq=seq, **kw)


def accepted(seq=0, *call_ids):
    return event(seq, accepted=pb.BatchAccepted(batch_id="b1", lanes=[pb.Lane(call_ids=list(call_ids))]))


def result(seq, call_id, index, text=""):
    return event(seq, result=pb.CallResult(call_id=call_id, index=index, content=[pb.Content(text=pb.TextContent(text=text))]))


def finished(seq=0):
    return event(seq, finished=pb.BatchFinished())


DETACH = pb.BatchOptions(detach=True)
CALLS = [{"call_id": "a", "name": "echo"}]


def quiet(context, seconds=30):
    """Holds a stream open and quiet for seconds, or until it ends."""
    end = time.monotonic() + seconds
    while context.is_active() and time.monotonic() < end:
        time.sleep(0.02)
    return
    yield


class KeepaliveTest(unittest.TestCase):
    def test_channels_ping_by_default_and_options_override(self):
        want = {"grpc.keepalive_time_ms": 30000, "grpc.keepalive_timeout_ms": 10000, "grpc.keepalive_permit_without_calls": 0}
        for module, make in ((grpc, lambda o: toolwire.Client("127.0.0.1:1", options=o).close()),
                             (grpc.aio, lambda o: asyncio.run(self._async_client(o)))):
            for options, expect in ((None, want), ([("grpc.keepalive_time_ms", 60000)], dict(want, **{"grpc.keepalive_time_ms": 60000}))):
                with mock.patch.object(module, "insecure_channel", wraps=module.insecure_channel) as channel:
                    make(options)
                got = dict(channel.call_args.kwargs["options"])
                self.assertEqual({k: got.get(k) for k in want}, expect, module.__name__)
                self.assertEqual(len(channel.call_args.kwargs["options"]), len(got), "an option set twice")

    @staticmethod
    async def _async_client(options):
        await toolwire.AsyncClient("127.0.0.1:1", options=options).close()

    def test_a_silently_dead_connection_is_reattached(self):
        def execute(req, ctx, n):
            yield accepted(1, "a")
            yield from quiet(ctx)

        def attach(req, ctx, n):
            yield result(2, "a", 0, "A")
            yield finished(3)

        # Pings every 0.2 s here (30 s by default), so that the test is short.
        fast = [("grpc.keepalive_time_ms", 200), ("grpc.keepalive_timeout_ms", 300)]
        with BatchServer(execute, attach) as server:
            proxy = FreezeProxy(server.addr)
            try:
                with toolwire.Client(proxy.addr, options=fast, reattach=(3, 0.01)) as client:
                    start, seqs = time.monotonic(), []
                    for ev in client.execute_batch(CALLS, options=DETACH, timeout=20):
                        seqs.append(ev.seq)
                        if ev.HasField("accepted"):
                            proxy.freeze()
                    self.assertEqual(seqs, [1, 2, 3])
                    self.assertLess(time.monotonic() - start, 5)
                    self.assertEqual(server.attaches, 1)
            finally:
                proxy.close()


# What a server that ends a batch's stream early, or says too much, sends;
# each with what collect must say and the results it keeps (call ID or None
# in each slot). None: a complete batch.
STREAMS = {
    "complete, results out of order": (
        [accepted(0, "a", "b", "c"), result(0, "c", 2, "C"), result(0, "a", 0, "A"), result(0, "b", 1, "B"), finished()],
        None, ["a", "b", "c"]),
    "no BatchFinished, a call without its result": (
        [accepted(0, "a", "b", "c"), result(0, "a", 0, "A"), result(0, "c", 2, "C")],
        'without results for calls ["b"]', ["a", None, "c"]),
    "no BatchFinished": (
        [accepted(0, "a"), result(0, "a", 0, "A")],
        "without BatchFinished", ["a"]),
    "nothing": ([], "without BatchAccepted", []),
    "a second result for a call": (
        [accepted(0, "a", "b"), result(0, "a", 0, "first"), result(0, "a", 0, "second"), result(0, "b", 1, "B"), finished()],
        'second result for call "a"', ["a", None]),
    "a result for a call not in the plan": (
        [accepted(0, "a", "b"), result(0, "a", 0, "A"), result(0, "zz", 1, "?"), finished()],
        'call "zz", which is not in the plan', ["a", None]),
    "indexes swapped": (
        [accepted(0, "a", "b"), result(0, "b", 0, "B"), result(0, "a", 1, "A"), finished()],
        'call "b" has index 0; its place in the plan is 1', [None, None]),
    "two plans": (
        [accepted(0, "a", "b"), result(0, "a", 0, "A"), accepted(0, "a", "b"), result(0, "a", 0, "A"), result(0, "b", 1, "B"), finished()],
        "a second BatchAccepted", ["a", None]),
    "a call planned twice": (
        [accepted(0, "a", "a", "b"), result(0, "a", 0, "A"), result(0, "b", 1, "B"), finished()],
        'the plan lists call "a" twice', []),
    "10,000 calls without results": (
        [accepted(0, *(f"c{i:05d}" for i in range(10_000)))],
        '"c00019"] and 9980 more', [None] * 10_000),
    "a result past the batch's calls": (
        [accepted(0, "a"), result(0, "a", 0, "A"), result(0, "zz", 7, "?"), finished()],
        'index 7; the batch has 1 calls', ["a"]),
    "a result before BatchAccepted": (
        [result(0, "a", 0, "A"), accepted(0, "a"), finished()],
        "before BatchAccepted", []),
}


class CollectTest(unittest.TestCase):
    """collect (Client's and AsyncClient's) returns a batch only when the
    stream showed all of it: one result per planned call, in batch order,
    and BatchFinished; else ToolwireError INTERNAL with what arrived."""

    def check(self, name, collect):
        events, err, slots = STREAMS[name]
        if err is None:
            batch = collect(events)
        else:
            with self.assertRaises(toolwire.ToolwireError) as cm:
                collect(events)
            self.assertEqual(cm.exception.code, grpc.StatusCode.INTERNAL, name)
            self.assertIn(err, str(cm.exception), name)
            batch = cm.exception.batch
            self.assertIsInstance(batch, toolwire.Batch, name)
        self.assertEqual([r and r.call_id for r in batch.results], slots, name)
        if "second" in name:
            self.assertEqual(toolwire.result_text(batch.results[0]), "first")

    def test_streams(self):
        def serve(req, ctx, n):
            yield from STREAMS[req.session_id][0]

        with BatchServer(serve) as server, toolwire.Client(server.addr) as client:
            for name in STREAMS:
                self.check(name, lambda _: client.collect(client.execute_batch(CALLS, session_id=name)))

            async def run(name):
                async with toolwire.AsyncClient(server.addr) as aclient:
                    return await aclient.collect(aclient.execute_batch(CALLS, session_id=name))

            for name in STREAMS:
                self.check(name, lambda _: asyncio.run(run(name)))
            for name in STREAMS:
                self.check(name, toolwire.Client.collect)  # a list of events

    def test_a_failed_stream_keeps_what_arrived(self):
        def serve(req, ctx, n):
            yield accepted(0, "a", "b")
            yield result(0, "b", 1, "B")
            ctx.abort(grpc.StatusCode.UNAVAILABLE, "gone")

        with BatchServer(serve) as server, toolwire.Client(server.addr) as client:
            with self.assertRaises(toolwire.ToolwireError) as cm:
                client.collect(client.execute_batch(CALLS))
            self.assertEqual(cm.exception.code, grpc.StatusCode.UNAVAILABLE)
            self.assertEqual([r and r.call_id for r in cm.exception.batch.results], [None, "b"])


def dropping(after_each=0.3):
    """ExecuteBatch and AttachBatch of a detached batch whose stream drops
    after each event; an attach waits after_each seconds before its event.
    Finished at seq 12."""

    def execute(req, ctx, n):
        yield accepted(1, "a")
        ctx.abort(grpc.StatusCode.UNAVAILABLE, "dropped")

    def attach(req, ctx, n):
        time.sleep(after_each)
        seq = req.after_seq + 1
        if seq >= 12:
            yield finished(seq)
            return
        yield event(seq, progress=pb.CallProgress(call_id="a", message=f"p{seq}"))
        ctx.abort(grpc.StatusCode.UNAVAILABLE, "dropped")

    return execute, attach


class ReattachDeadlineTest(unittest.TestCase):
    """timeout bounds a reattaching stream as a whole: each attach gets what
    is left of it, and none starts past it."""

    def check(self, run):
        with BatchServer(*dropping()) as server:
            start = time.monotonic()
            with self.assertRaises(toolwire.ToolwireError) as cm:
                run(server.addr)
            took = time.monotonic() - start
            self.assertIn(cm.exception.code, (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNAVAILABLE), str(cm.exception))
            self.assertGreater(took, 0.6)
            self.assertLess(took, 1.5)  # each attach given a fresh second: 3.6 s
            self.assertLessEqual(server.attaches, 4)

    def test_sync(self):
        def run(addr):
            with toolwire.Client(addr, reattach=(100, 0.01)) as client:
                for _ in client.execute_batch(CALLS, options=DETACH, timeout=1):
                    pass

        self.check(run)

    def test_async(self):
        async def run(addr):
            async with toolwire.AsyncClient(addr, reattach=(100, 0.01)) as client:
                async for _ in client.execute_batch(CALLS, options=DETACH, timeout=1):
                    pass

        self.check(lambda addr: asyncio.run(run(addr)))

    def test_attach_batch(self):
        def run(addr):
            with toolwire.Client(addr, reattach=(100, 0.01)) as client:
                for _ in client.attach_batch("b1", 1, timeout=1):
                    pass

        self.check(run)


class ReattachCancelTest(unittest.TestCase):
    """cancel() while waiting to re-attach ends the wait and the stream
    with CANCELLED, so collect does not take what arrived for a batch."""

    @staticmethod
    def server():
        def execute(req, ctx, n):
            yield accepted(1, "a")
            ctx.abort(grpc.StatusCode.UNAVAILABLE, "dropped")

        def attach(req, ctx, n):
            ctx.abort(grpc.StatusCode.UNAVAILABLE, "dropped again")
            yield

        return BatchServer(execute, attach)

    def test_sync(self):
        with self.server() as server, toolwire.Client(server.addr, reattach=(3, 3.0)) as client:
            for collect in (False, True):
                stream = client.execute_batch(CALLS, options=DETACH)
                timer = threading.Timer(0.2, stream.cancel)
                timer.start()
                start = time.monotonic()
                with self.assertRaises(toolwire.ToolwireError) as cm:
                    if collect:
                        client.collect(stream)
                    else:
                        for _ in stream:
                            pass
                timer.join()
                self.assertEqual(cm.exception.code, grpc.StatusCode.CANCELLED, str(cm.exception))
                self.assertLess(time.monotonic() - start, 2)  # not the 3 s backoff
                with self.assertRaises(StopIteration):
                    next(stream)

    def test_async(self):
        async def run(addr):
            async with toolwire.AsyncClient(addr, reattach=(3, 3.0)) as client:
                stream = client.execute_batch(CALLS, options=DETACH)
                asyncio.get_running_loop().call_later(0.2, stream.cancel)
                start = time.monotonic()
                with self.assertRaises(toolwire.ToolwireError) as cm:
                    await client.collect(stream)
                self.assertEqual(cm.exception.code, grpc.StatusCode.CANCELLED, str(cm.exception))
                self.assertLess(time.monotonic() - start, 2)

        with self.server() as server:
            asyncio.run(run(server.addr))


def refuse_with_retry_info(ctx, ms=200):
    """Fails the RPC as a server's rate limit does: RESOURCE_EXHAUSTED with
    a google.rpc.RetryInfo of ms milliseconds."""
    from toolwire._retry import RETRY_INFO_TYPE_URL, _messages

    status, retry_info = _messages()
    ri = retry_info()
    ri.retry_delay.FromMilliseconds(ms)
    st = status(code=grpc.StatusCode.RESOURCE_EXHAUSTED.value[0], message="rate limit: slow down")
    st.details.add(type_url=RETRY_INFO_TYPE_URL, value=ri.SerializeToString())
    ctx.set_trailing_metadata([("grpc-status-details-bin", st.SerializeToString())])
    ctx.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "rate limit: slow down")


class ReattachRateLimitTest(unittest.TestCase):
    """With reattach, a detached batch refused by a rate limit before any
    event is sent again after the delay, as without it."""

    @staticmethod
    def server():
        def execute(req, ctx, n):
            if n == 1:
                refuse_with_retry_info(ctx)
            yield accepted(1, "a")
            yield result(2, "a", 0, "A")
            yield finished(3)

        return BatchServer(execute)

    def test_sync(self):
        for retries in (3, 0):
            waits = []
            with self.server() as server, toolwire.Client(server.addr, reattach=(3, 0.1), rate_limit_retries=retries,
                                                          on_rate_limit=lambda e, d: waits.append(d)) as client:
                stream = client.execute_batch(CALLS, options=DETACH, timeout=10)
                if retries:
                    self.assertEqual(toolwire.result_text(client.collect(stream).results[0]), "A")
                    self.assertEqual((server.executes, waits), (2, [0.2]))
                else:
                    with self.assertRaises(toolwire.ToolwireError) as cm:
                        client.collect(stream)
                    self.assertEqual((cm.exception.code, cm.exception.retry_delay), (grpc.StatusCode.RESOURCE_EXHAUSTED, 0.2))
                    self.assertEqual((server.executes, waits), (1, []))

    def test_async(self):
        async def run(addr):
            async with toolwire.AsyncClient(addr, reattach=(3, 0.1)) as client:
                return await client.collect(client.execute_batch(CALLS, options=DETACH, timeout=10))

        with self.server() as server:
            self.assertEqual(toolwire.result_text(asyncio.run(run(server.addr)).results[0]), "A")
            self.assertEqual(server.executes, 2)

    def test_cancel_ends_the_wait(self):
        streams = []
        with self.server() as server, toolwire.Client(server.addr, reattach=(3, 0.1), on_rate_limit=lambda e, d: streams[0].cancel()) as client:
            streams.append(client.execute_batch(CALLS, options=DETACH))
            with self.assertRaises(toolwire.ToolwireError) as cm:
                client.collect(streams[0])
            self.assertEqual(cm.exception.code, grpc.StatusCode.RESOURCE_EXHAUSTED)
            self.assertEqual(server.executes, 1)
