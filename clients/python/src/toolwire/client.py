"""The blocking toolwire client over grpcio."""

import itertools
import time

import grpc

from toolwire._calls import LIST_RESTARTS, Batch, Pages, batch_request, call_result, call_tool_request, channel_args, channel_options, collect_failed
from toolwire.errors import DEFAULT_RATE_LIMIT_RETRIES, ToolwireError, _Reattaching, _Retries, _Stream, is_finished
from toolwire.v1 import toolwire_pb2 as pb
from toolwire.v1 import toolwire_pb2_grpc as pb_grpc


class Client:
    """A toolwire client. Use it as a context manager, or close() it.

    token: sent as "authorization: Bearer <token>"; needs TLS unless
    insecure_token=True. tls: True for the system's roots, or
    grpc.ChannelCredentials. options: grpc channel options. A failed RPC
    raises ToolwireError.

    rate_limit_retries: how many times execute_batch and call_tool wait out
    a refusal that says when to retry (RESOURCE_EXHAUSTED with a
    google.rpc.RetryInfo, what a server's rate limit sends) and send the
    batch or call again: such a refusal comes before anything ran, so
    sending it again is safe. A retry that would start past the RPC's
    timeout is not waited for; the refusal is raised (its retry_delay says
    when). Default 3; 0 raises the refusal at once. on_rate_limit(err,
    delay) is called before each such wait (delay in seconds).

    reattach: (attempts, backoff seconds) to resume a detached batch's
    dropped stream (execute_batch with options.detach, attach_batch) with
    AttachBatch from the last seq seen; default None, a dropped stream
    raises. The RPC's timeout covers the re-attaches: each gets what is
    left of it, and none starts past it. The channel pings the server after 30 s without reads while a
    call is open, and drops a connection whose ping is not answered in 10 s
    (UNAVAILABLE, which reattach resumes): a connection that died silently
    does not hold a stream until its timeout ("grpc.keepalive_time_ms" and
    "grpc.keepalive_timeout_ms" in options override them).

    The channel receives messages of up to 64 MiB (a listing's size; an
    option "grpc.max_receive_message_length" in options overrides it)."""

    def __init__(self, target, *, token=None, tls=None, insecure_token=False, options=None,
                 rate_limit_retries=DEFAULT_RATE_LIMIT_RETRIES, on_rate_limit=None, reattach=None):
        self._reattach = reattach
        creds, self._metadata = channel_args(target, token, tls, insecure_token)
        self.rate_limit_retries = rate_limit_retries
        self.on_rate_limit = on_rate_limit
        if creds is None:
            self.channel = grpc.insecure_channel(target, options=channel_options(options))
        else:
            self.channel = grpc.secure_channel(target, creds, options=channel_options(options))
        self.stub = pb_grpc.ToolServiceStub(self.channel)

    def close(self):
        self.channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def list_tools(self, timeout=30, *, page_size=None, max_bytes=None, max_pages=None):
        """Every tool the caller may call, sorted by name, and the
        registry's revision, as one pb.ListToolsResponse however large the
        catalog: it asks for them a page at a time (page_size tools, default
        1000, the most a server's page holds) and puts the pages together.
        When the tools change between its pages (the server answers
        ABORTED) it starts over, up to three times, so that every tool
        belongs to the one revision it returns. A server that predates
        paging answers the first request with every tool. timeout (seconds)
        bounds each page. One listing reads at most max_bytes of responses
        (default 64 MiB, a server's max_list_bytes default) and max_pages
        pages (default 10,000), and raises RESOURCE_EXHAUSTED past either:
        a server whose pages never end costs a bounded amount; a page token
        named twice raises INTERNAL at once."""
        for restart in itertools.count():
            try:
                return self._list_pages(timeout, Pages(page_size, max_bytes, max_pages))
            except ToolwireError as e:
                if e.code != grpc.StatusCode.ABORTED or restart >= LIST_RESTARTS:
                    raise

    def _list_pages(self, timeout, pages):
        while True:
            try:
                resp = self.stub.ListTools(pages.request(), timeout=timeout, metadata=self._metadata)
            except grpc.RpcError as e:
                raise ToolwireError.from_rpc(e) from e
            if not pages.add(resp):
                return pages.listing

    def search_tools(self, query, *, max_results=0, timeout=30):
        """The tools the caller may call that match query, best first, at
        most max_results of them (default 10, at most 100), and how many
        match in all (total_matches), as a pb.SearchToolsResponse: for a
        runtime that hands its model only the tools a step needs. A query
        matches a tool when each of its words, and "quoted phrases", occurs
        in the tool's name, title, description or source, ignoring case. An
        empty query raises INVALID_ARGUMENT."""
        try:
            return self.stub.SearchTools(pb.SearchToolsRequest(query=query, max_results=max_results), timeout=timeout, metadata=self._metadata)
        except grpc.RpcError as e:
            raise ToolwireError.from_rpc(e) from e

    def execute_batch(self, calls, *, session_id="", options=None, timeout=None):
        """Runs calls as one batch; returns the stream of
        ExecuteBatchResponse events (iterate it; .cancel() cancels the batch's
        running calls; an RPC that fails raises ToolwireError, CANCELLED after
        a cancel()). calls are pb.ToolCall or dicts (see to_call). A refusal
        that says when to retry (a rate limit's, before any event) is waited
        out and the batch sent again, up to rate_limit_retries times;
        cancel() ends the wait, raising the refusal. timeout covers the
        waits too."""
        req = batch_request(calls, session_id, options)
        if self._reattach and req.options.detach:
            return self._follow(lambda t: self.stub.ExecuteBatch(req, timeout=t, metadata=self._metadata), "", 0, timeout)
        return _Stream(
            lambda t: self.stub.ExecuteBatch(req, timeout=t, metadata=self._metadata),
            _Retries(self.rate_limit_retries, self.on_rate_limit, timeout),
            last=is_finished,
        )

    def attach_batch(self, batch_id, after_seq=0, *, timeout=None):
        """The events of the detached batch batch_id numbered after
        after_seq (all for 0), then its live ones until finished, as
        execute_batch's stream; on any replica sharing the server's store.
        .cancel() ends only this reader. NOT_FOUND for an unknown, expired or
        another caller's batch. With reattach it resumes after a drop."""
        if self._reattach:
            return self._follow(lambda t: self._attach(batch_id, after_seq, t), batch_id, after_seq, timeout)
        return _Stream(lambda _: self._attach(batch_id, after_seq, timeout), last=is_finished)

    def _attach(self, batch_id, after_seq, timeout):
        return self.stub.AttachBatch(pb.AttachBatchRequest(batch_id=batch_id, after_seq=after_seq), timeout=timeout, metadata=self._metadata)

    def _follow(self, open_stream, batch_id, after, timeout):
        attempts, backoff = self._reattach
        # One deadline, timeout seconds from now, for every attach: each is
        # given what is left of it.
        retries = _Retries(self.rate_limit_retries, self.on_rate_limit, timeout)
        return _Reattaching(open_stream, self._attach, batch_id, after, attempts, backoff, retries)

    @staticmethod
    def collect(events):
        """Reads a batch's events to the end into a Batch, one result per
        call in batch order; progress events are dropped. It raises
        ToolwireError when the stream fails, and INTERNAL when it ends
        without BatchAccepted, a call's result or BatchFinished, or a result
        does not fit the plan (a second one for a call, one for a call not
        in it): the error's batch holds what arrived (None for a missing
        result), and the stream is cancelled."""
        batch = Batch()
        try:
            for ev in events:
                batch.add(ev)
            batch.check_complete()
        except ToolwireError as e:
            raise collect_failed(batch, e, events)
        return batch

    def call_tool(self, name, arguments=None, *, call_id="call", session_id="", idempotency_key="", call_timeout=None, timeout=None):
        """Runs one call with CallTool, the unary fast path (no progress
        events), and returns its pb.CallResult: a failing tool is a result
        (is_error, error_kind), not an exception; a failed RPC (a malformed
        call among them) raises ToolwireError. arguments as in to_call;
        call_timeout is the call's own timeout and timeout the RPC's, in
        seconds, waits included. A refusal that says when to retry (a rate
        limit's) is waited out and the call sent again, up to
        rate_limit_retries times. A response without a result, or with
        another call's, raises INTERNAL. A server without CallTool
        (UNIMPLEMENTED: one from before it, in a rolling upgrade) gets the
        call as a batch of one."""
        req = call_tool_request(name, arguments, call_id, session_id, idempotency_key, call_timeout)
        retries = _Retries(self.rate_limit_retries, self.on_rate_limit, timeout)
        for attempt in itertools.count():
            try:
                resp = self.stub.CallTool(req, timeout=retries.timeout(), metadata=self._metadata)
            except grpc.RpcError as e:
                err = ToolwireError.from_rpc(e)
                if err.code == grpc.StatusCode.UNIMPLEMENTED:
                    # A server from before CallTool (which a balancer can
                    # pick in a rolling upgrade) has ExecuteBatch only: the
                    # call goes as a batch of one, which runs it alike.
                    batch = self.collect(self.execute_batch([req.call], session_id=req.session_id, timeout=retries.timeout()))
                    return call_result(req, pb.CallToolResponse(result=batch.results[0]))
                d = retries.delay(err, attempt)
                if d is None:
                    raise err from e
                time.sleep(d)
                continue
            return call_result(req, resp)

    def watch_tools(self, timeout=None):
        """The registry's revision now and at every change: a stream of
        WatchToolsResponse (.cancel() ends it)."""
        return _Stream(lambda _: self.stub.WatchTools(pb.WatchToolsRequest(), timeout=timeout, metadata=self._metadata))
