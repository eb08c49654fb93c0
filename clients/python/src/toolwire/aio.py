"""The asyncio toolwire client over grpc.aio, and the step batcher.

Agent frameworks run a model step's tool calls at once (asyncio.gather over
each tool's coroutine); one RPC per call would throw away toolwire's lanes.
StepBatcher gathers the calls that arrive within a short window into one
ExecuteBatch and hands each caller its own result."""

import asyncio
import itertools
import uuid

import grpc

from toolwire._calls import LIST_RESTARTS, Batch, Pages, batch_request, call_result, call_tool_request, channel_args, channel_options, collect_failed, to_call
from toolwire.errors import DEFAULT_RATE_LIMIT_RETRIES, ToolwireError, _AsyncReattaching, _AsyncStream, _Retries, is_finished
from toolwire.v1 import toolwire_pb2 as pb
from toolwire.v1 import toolwire_pb2_grpc as pb_grpc


class AsyncClient:
    """The asyncio twin of toolwire.Client; same options (rate_limit_retries
    and on_rate_limit among them). Use it as an async context manager, or
    await close(). A failed RPC raises ToolwireError."""

    def __init__(self, target, *, token=None, tls=None, insecure_token=False, options=None,
                 rate_limit_retries=DEFAULT_RATE_LIMIT_RETRIES, on_rate_limit=None, reattach=None):
        self._reattach = reattach
        creds, self._metadata = channel_args(target, token, tls, insecure_token)
        self.rate_limit_retries = rate_limit_retries
        self.on_rate_limit = on_rate_limit
        if creds is None:
            self.channel = grpc.aio.insecure_channel(target, options=channel_options(options))
        else:
            self.channel = grpc.aio.secure_channel(target, creds, options=channel_options(options))
        self.stub = pb_grpc.ToolServiceStub(self.channel)

    async def close(self):
        await self.channel.close()

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.close()

    async def list_tools(self, timeout=30, *, page_size=None, max_bytes=None, max_pages=None):
        """Every tool the caller may call and the registry's revision, a
        page at a time, within the same bounds, as Client.list_tools."""
        for restart in itertools.count():
            try:
                return await self._list_pages(timeout, Pages(page_size, max_bytes, max_pages))
            except ToolwireError as e:
                if e.code != grpc.StatusCode.ABORTED or restart >= LIST_RESTARTS:
                    raise

    async def _list_pages(self, timeout, pages):
        while True:
            try:
                resp = await self.stub.ListTools(pages.request(), timeout=timeout, metadata=self._metadata)
            except grpc.RpcError as e:
                raise ToolwireError.from_rpc(e) from e
            if not pages.add(resp):
                return pages.listing

    async def search_tools(self, query, *, max_results=0, timeout=30):
        """The tools that match query, best first, as Client.search_tools."""
        try:
            return await self.stub.SearchTools(pb.SearchToolsRequest(query=query, max_results=max_results), timeout=timeout, metadata=self._metadata)
        except grpc.RpcError as e:
            raise ToolwireError.from_rpc(e) from e

    def execute_batch(self, calls, *, session_id="", options=None, timeout=None):
        """Runs calls as one batch; returns the call, an async iterator of
        events (.cancel() cancels the batch's running calls; an RPC that fails
        raises ToolwireError). A refusal that says when to retry (a rate
        limit's, before any event) is waited out and the batch sent again,
        up to rate_limit_retries times; cancel(), or cancelling the awaiting
        task, ends the wait."""
        req = batch_request(calls, session_id, options)
        if self._reattach and req.options.detach:
            return self._follow(lambda t: self.stub.ExecuteBatch(req, timeout=t, metadata=self._metadata), "", 0, timeout)
        return _AsyncStream(
            lambda t: self.stub.ExecuteBatch(req, timeout=t, metadata=self._metadata),
            _Retries(self.rate_limit_retries, self.on_rate_limit, timeout),
            last=is_finished,
        )

    def attach_batch(self, batch_id, after_seq=0, *, timeout=None):
        """Client.attach_batch for asyncio: the detached batch's events after
        after_seq, then its live ones (.cancel() ends only this reader);
        with reattach it resumes after a drop."""
        if self._reattach:
            return self._follow(lambda t: self._attach(batch_id, after_seq, t), batch_id, after_seq, timeout)
        return _AsyncStream(lambda _: self._attach(batch_id, after_seq, timeout), last=is_finished)

    def _attach(self, batch_id, after_seq, timeout):
        return self.stub.AttachBatch(pb.AttachBatchRequest(batch_id=batch_id, after_seq=after_seq), timeout=timeout, metadata=self._metadata)

    def _follow(self, open_stream, batch_id, after, timeout):
        attempts, backoff = self._reattach
        # One deadline, timeout seconds from now, for every attach: each is
        # given what is left of it.
        retries = _Retries(self.rate_limit_retries, self.on_rate_limit, timeout)
        return _AsyncReattaching(open_stream, self._attach, batch_id, after, attempts, backoff, retries)

    @staticmethod
    async def collect(events):
        """Client.collect for asyncio: the events to the end as a Batch,
        ToolwireError (with .batch, what arrived) when the stream fails or
        is incomplete or a result does not fit the plan."""
        batch = Batch()
        try:
            async for ev in events:
                batch.add(ev)
            batch.check_complete()
        except ToolwireError as e:
            raise collect_failed(batch, e, events)
        return batch

    async def call_tool(self, name, arguments=None, *, call_id="call", session_id="", idempotency_key="", call_timeout=None, timeout=None):
        """Client.call_tool for asyncio: one unary CallTool, a rate limit's
        refusal waited out as there. Cancelling the awaiting task cancels the
        call on the server, or ends the wait."""
        req = call_tool_request(name, arguments, call_id, session_id, idempotency_key, call_timeout)
        retries = _Retries(self.rate_limit_retries, self.on_rate_limit, timeout)
        for attempt in itertools.count():
            try:
                resp = await self.stub.CallTool(req, timeout=retries.timeout(), metadata=self._metadata)
            except grpc.RpcError as e:
                err = ToolwireError.from_rpc(e)
                if err.code == grpc.StatusCode.UNIMPLEMENTED:
                    # A server from before CallTool: as Client.call_tool.
                    batch = await self.collect(self.execute_batch([req.call], session_id=req.session_id, timeout=retries.timeout()))
                    return call_result(req, pb.CallToolResponse(result=batch.results[0]))
                d = retries.delay(err, attempt)
                if d is None:
                    raise err from e
                await asyncio.sleep(d)
                continue
            return call_result(req, resp)

    def watch_tools(self, timeout=None):
        return _AsyncStream(lambda _: self.stub.WatchTools(pb.WatchToolsRequest(), timeout=timeout, metadata=self._metadata))


class StepBatcher:
    """Gathers concurrent execute() calls into ExecuteBatch RPCs.

    window: how long the first call of a step waits for the others, in
    seconds (0: the calls made before the event loop next runs; default
    0.002). max_calls: most calls in one batch (default 256). on_batch(accepted,
    call_ids) sees each batch's lane plan. enabled=False sends each call as a
    batch of its own, for comparison."""

    def __init__(self, client, *, window=0.002, max_calls=256, session_id="", on_batch=None, enabled=True):
        self.client = client
        self.window = window
        self.max_calls = max_calls
        self.session_id = session_id
        self.on_batch = on_batch
        self.enabled = enabled
        self._pending = []  # (pb.ToolCall, future, on_progress)
        self._timer = None

    async def execute(self, call, on_progress=None):
        """Runs one call as part of the current step's batch and returns its
        pb.CallResult. Failed calls return too (is_error, with text for the
        model); it raises ToolwireError only when the RPC fails (auth, an
        unreachable server, overload, shutdown): the run must end.
        Cancelling the awaiting task drops the call; once every call of its
        batch is cancelled, the RPC is cancelled and the server cancels the
        tools."""
        c = to_call(call)
        if not c.call_id:
            c.call_id = uuid.uuid4().hex
        if any(p[0].call_id == c.call_id for p in self._pending):
            self.flush()  # call IDs are unique within a batch
        fut = asyncio.get_running_loop().create_future()
        self._pending.append((c, fut, on_progress))
        if not self.enabled or len(self._pending) >= self.max_calls:
            self.flush()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self.window, self.flush)
        return await fut

    def flush(self):
        """Sends the gathered calls now."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        batch = [p for p in self._pending if not p[1].done()]
        self._pending = []
        if batch:
            asyncio.get_running_loop().create_task(self._run(batch))

    async def _run(self, batch):
        by_id = {c.call_id: (fut, on_progress) for c, fut, on_progress in batch}
        stream = self.client.execute_batch([c for c, _, _ in batch], session_id=self.session_id)

        def cancel_if_all_done(_):
            if all(fut.done() for _, fut, _ in batch):
                stream.cancel()

        for _, fut, _ in batch:
            fut.add_done_callback(cancel_if_all_done)
        try:
            async for ev in stream:
                kind = ev.WhichOneof("event")
                if kind == "accepted" and self.on_batch:
                    self.on_batch(ev.accepted, [c.call_id for c, _, _ in batch])
                elif kind == "progress":
                    on_progress = by_id.get(ev.progress.call_id, (None, None))[1]
                    if on_progress:
                        on_progress(ev.progress)
                elif kind == "result":
                    fut = by_id.get(ev.result.call_id, (None,))[0]
                    if fut and not fut.done():
                        fut.set_result(ev.result)
            err = ToolwireError(grpc.StatusCode.INTERNAL, "the batch ended without this call's result")
        except (asyncio.CancelledError, ToolwireError, grpc.RpcError) as e:
            # grpc.aio reports a call cancelled above as CancelledError (or a
            # CANCELLED status): nobody is waiting then.
            if all(fut.done() for _, fut, _ in batch):
                return
            if isinstance(e, asyncio.CancelledError):
                raise  # this task itself was cancelled: the loop is closing
            err = e if isinstance(e, ToolwireError) else ToolwireError.from_rpc(e)
        except Exception as e:  # noqa: BLE001 - every waiting caller must hear of it
            err = e
        for _, fut, _ in batch:
            if not fut.done():
                fut.set_exception(err)
