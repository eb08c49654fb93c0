"""Listing and searching a catalog larger than a gRPC message: list_tools
asks for it a page at a time and puts the pages together, and starts over
when the tools change between its pages; search_tools finds the few tools
a step needs. Against a real `toolwire serve` of its own (TOOLWIRE_BIN)
with a 1,200-tool catalog, the shared server (TOOLWIRE_ADDR), and stub
servers in this process for what a real server does not do."""

import asyncio
import json
import os
import signal
import tempfile
import threading
import time
import unittest
from concurrent import futures

import grpc

import toolwire
from toolwire import pb
from toolwire.v1 import toolwire_pb2_grpc as pb_grpc

from test_toolwire import ADDR, OwnServer, need_bin, need_server

WORDS = ("the a repository pull request issue list create update delete organization "
         "user team token scope access returned page per sort").split()


def catalog_config(path, n, extra=None):
    """Writes a config of n HTTP tools with descriptions of about 4.5 KB
    (as large as GitHub's declarations, with their schemas) and, when extra
    is set, one more tool of that name."""
    seed = 31
    tools = []
    for i in range(n):
        words = []
        for _ in range(700):
            seed = (seed * 1103515245 + 12345) % 2147483648
            words.append(WORDS[seed % len(WORDS)])
        tools.append({"name": f"tool_{i:05d}", "title": f"Tool {i}", "description": " ".join(words),
                      "url": f"http://127.0.0.1:9/t{i}", "parameters": {"type": "object"}})
    if extra:
        tools.append({"name": extra, "description": "added later", "url": "http://127.0.0.1:9/extra", "parameters": {"type": "object"}})
    with open(path + ".tmp", "w") as f:
        json.dump({"http_tools": tools}, f)
    os.replace(path + ".tmp", path)  # the server never reads half a file


class _Counter(grpc.UnaryUnaryClientInterceptor):
    """Counts the ListTools calls of a channel."""

    def __init__(self):
        self.calls = 0

    def intercept_unary_unary(self, continuation, details, request):
        if details.method.endswith("/ListTools"):
            self.calls += 1
        return continuation(details, request)


class CatalogTest(unittest.TestCase):
    """A server of its own with 1,200 tools, 5.4 MB of declarations: more
    than a 4 MiB message."""

    @classmethod
    def setUpClass(cls):
        need_bin()
        cls.dir = tempfile.mkdtemp(prefix="toolwire-list-")
        cls.config = os.path.join(cls.dir, "toolwire.json")
        catalog_config(cls.config, 1200)
        cls.server = OwnServer(args=("--config", cls.config))

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        for name in os.listdir(cls.dir):
            os.remove(os.path.join(cls.dir, name))
        os.rmdir(cls.dir)

    def test_list_tools_pages(self):
        counter = _Counter()
        with toolwire.Client(self.server.addr) as client:
            client.stub = pb_grpc.ToolServiceStub(grpc.intercept_channel(client.channel, counter))
            all_ = client.list_tools()
            names = [t.name for t in all_.tools]
            # The catalog's 1,200 tools and the server's own (--diag's, the workspace's).
            self.assertEqual(sum(n.startswith("tool_") for n in names), 1200)
            self.assertEqual(names, sorted(set(names)))
            self.assertTrue(all_.revision)
            self.assertEqual(all_.next_page_token, "")
            self.assertGreaterEqual(counter.calls, 2, "5.4 MB in pages within 4 MiB takes 2 or more")
            before = counter.calls
            self.assertEqual([t.name for t in client.list_tools(page_size=100).tools], names)
            self.assertEqual(counter.calls - before, -(-len(names) // 100))

    def test_async_list_tools_pages(self):
        async def run():
            async with toolwire.AsyncClient(self.server.addr) as client:
                return await client.list_tools(page_size=300)

        res = asyncio.run(run())
        self.assertEqual(sum(t.name.startswith("tool_") for t in res.tools), 1200)

    def test_search_tools(self):
        with toolwire.Client(self.server.addr) as client:
            found = client.search_tools("tool_00042")
            self.assertEqual([t.name for t in found.tools], ["tool_00042"])
            self.assertEqual(found.total_matches, 1)
            some = client.search_tools("repository", max_results=5)
            self.assertEqual(len(some.tools), 5)
            self.assertGreater(some.total_matches, 5)

    def test_zz_token_of_an_earlier_revision(self):
        # Last in the class (unittest runs them by name): it changes the catalog.
        with toolwire.Client(self.server.addr) as client:
            count = len(client.list_tools().tools)
            first = client.stub.ListTools(pb.ListToolsRequest(page_size=2))
            catalog_config(self.config, 1200, extra="aaa_added")
            self.server.proc.send_signal(signal.SIGHUP)
            for i in range(200):  # the server reads its config again
                if client.list_tools().revision != first.revision:
                    break
                time.sleep(0.05)
            else:
                self.fail("the server did not take the new config")
            with self.assertRaises(grpc.RpcError) as cm:
                client.stub.ListTools(pb.ListToolsRequest(page_size=2, page_token=first.next_page_token))
            self.assertEqual(cm.exception.code(), grpc.StatusCode.ABORTED)
            self.assertIn("list them again from the first page", cm.exception.details())
            again = client.list_tools()
            self.assertEqual(again.tools[0].name, "aaa_added")
            self.assertEqual(len(again.tools), count + 1)


class StubServer:
    """A ToolService in this process whose ListTools answers page(request,
    n) for its nth call: a pb.ListToolsResponse, or a grpc.StatusCode to
    fail with."""

    def __init__(self, page):
        self.calls = 0
        self.sizes = []
        self._lock = threading.Lock()

        def list_tools(request, context):
            with self._lock:
                self.calls += 1
                n = self.calls
                self.sizes.append(request.page_size)
            res = page(request, n)
            if isinstance(res, grpc.StatusCode):
                context.abort(res, "the tools changed")
            return res

        handler = grpc.method_handlers_generic_handler("toolwire.v1.ToolService", {
            "ListTools": grpc.unary_unary_rpc_method_handler(
                list_tools,
                request_deserializer=pb.ListToolsRequest.FromString,
                response_serializer=pb.ListToolsResponse.SerializeToString,
            ),
        })
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        self.server.add_generic_rpc_handlers((handler,))
        self.addr = f"127.0.0.1:{self.server.add_insecure_port('127.0.0.1:0')}"
        self.server.start()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.server.stop(None).wait()


def tools(*names):
    return [pb.Tool(name=n) for n in names]


class OtherServersTest(unittest.TestCase):
    def test_starts_over_when_the_tools_change_and_gives_up_after_three(self):
        names = ["a", "b", "c"]

        def page(req, n):
            # Pages of one tool; the second page of the first listing is
            # refused as a server refuses a token of an earlier revision.
            if n == 2:
                return grpc.StatusCode.ABORTED
            i = names.index(req.page_token) + 1 if req.page_token else 0
            return pb.ListToolsResponse(tools=tools(names[i]), revision="r1" if n == 1 else "r2",
                                        next_page_token=names[i] if i < 2 else "")

        with StubServer(page) as stub, toolwire.Client(stub.addr) as client:
            res = client.list_tools(page_size=1)
            self.assertEqual([t.name for t in res.tools], names)
            self.assertEqual(res.revision, "r2")
            self.assertEqual(stub.calls, 5)  # a, refused, then a, b, c

        def always(req, n):
            return grpc.StatusCode.ABORTED if req.page_token else pb.ListToolsResponse(tools=tools("a"), revision="r", next_page_token="a")

        with StubServer(always) as stub, toolwire.Client(stub.addr) as client:
            with self.assertRaises(toolwire.ToolwireError) as cm:
                client.list_tools()
            self.assertEqual(cm.exception.code, grpc.StatusCode.ABORTED)
            self.assertEqual(stub.calls, 8)  # four listings of two pages

    def test_a_page_of_another_revision_starts_over(self):
        # A server that does not check tokens: the revision changes under the listing.
        def page(req, n):
            rev = "r1" if n == 1 else "r2"
            return pb.ListToolsResponse(tools=tools("b" if req.page_token else "a"), revision=rev,
                                        next_page_token="" if req.page_token else "a")

        with StubServer(page) as stub, toolwire.Client(stub.addr) as client:
            res = client.list_tools()
            self.assertEqual(([t.name for t in res.tools], res.revision), (["a", "b"], "r2"))
            self.assertEqual(stub.calls, 4)

    def test_a_server_that_does_not_page_and_pages_that_do_not_advance(self):
        with StubServer(lambda req, n: pb.ListToolsResponse(tools=tools("a", "b"), revision="r")) as stub, \
                toolwire.Client(stub.addr) as client:
            self.assertEqual(len(client.list_tools(page_size=1).tools), 2)
            self.assertEqual(stub.calls, 1)
            client.list_tools(page_size=0)
            client.list_tools()
            self.assertEqual(stub.sizes, [1, 1000, 1000])  # 0 or unset: the most a page holds

        stuck = lambda req, n: pb.ListToolsResponse(tools=tools("a"), revision="r", next_page_token="more")  # noqa: E731
        with StubServer(stuck) as stub, toolwire.Client(stub.addr) as client:
            with self.assertRaisesRegex(toolwire.ToolwireError, "do not advance") as cm:
                client.list_tools()
            self.assertEqual(cm.exception.code, grpc.StatusCode.INTERNAL)
            self.assertEqual(stub.calls, 2)

    def test_pages_from_replicas_of_two_versions(self):
        # In a rolling upgrade a balancer sends the second page's request to
        # a replica that predates paging, which answers with every tool: that
        # is the listing, whatever its revision, where list_tools failed
        # ("the server's pages do not advance", or ABORTED).
        for old_revision in ("r1", "r0"):
            def page(req, n, old_revision=old_revision):
                if not req.page_token:
                    return pb.ListToolsResponse(tools=tools("a"), revision="r1", next_page_token="t")
                return pb.ListToolsResponse(tools=tools("a", "b", "c"), revision=old_revision)

            with StubServer(page) as stub, toolwire.Client(stub.addr) as client:
                res = client.list_tools(page_size=1)
                self.assertEqual(([t.name for t in res.tools], res.revision, res.next_page_token), (["a", "b", "c"], old_revision, ""))
                self.assertEqual(stub.calls, 2)

    def test_async_empty_page_that_is_not_the_last(self):
        empty = lambda req, n: pb.ListToolsResponse(revision="r", next_page_token="more")  # noqa: E731

        async def run(addr):
            async with toolwire.AsyncClient(addr) as client:
                await client.list_tools()

        with StubServer(empty) as stub:
            with self.assertRaisesRegex(toolwire.ToolwireError, "do not advance"):
                asyncio.run(run(stub.addr))
            self.assertEqual(stub.calls, 1)

    def test_receives_a_listing_larger_than_4_mib(self):
        # An old server's whole listing in one message: 5 MB.
        big = pb.ListToolsResponse(tools=[pb.Tool(name=f"t{i:04d}", description="x" * 5000) for i in range(1000)], revision="r")
        with StubServer(lambda req, n: big) as stub, toolwire.Client(stub.addr) as client:
            self.assertEqual(len(client.list_tools().tools), 1000)
        with StubServer(lambda req, n: big) as stub, \
                toolwire.Client(stub.addr, options=[("grpc.max_receive_message_length", 1 << 20)]) as client:
            with self.assertRaises(toolwire.ToolwireError) as cm:
                client.list_tools()
            self.assertEqual(cm.exception.code, grpc.StatusCode.RESOURCE_EXHAUSTED)


class SearchTest(unittest.IsolatedAsyncioTestCase):
    def setUp(self):
        need_server()

    async def test_search(self):
        with toolwire.Client(ADDR) as client:
            found = client.search_tools("given message")
            self.assertEqual([t.name for t in found.tools], ["fail"])
            self.assertEqual(found.total_matches, 1)
            self.assertTrue(found.revision)
            with self.assertRaisesRegex(toolwire.ToolwireError, "the query is empty") as cm:
                client.search_tools("  ")
            self.assertEqual(cm.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
        async with toolwire.AsyncClient(ADDR) as client:
            some = await client.search_tools("GIVEN", max_results=2)
            self.assertEqual(len(some.tools), 2)
            self.assertEqual(some.total_matches, 3)
