"""The one exception the package raises when talking to toolwire fails."""

import grpc


class ToolwireError(Exception):
    """An RPC to toolwire that failed: what the runtime must fix (a wrong or
    missing token, an unreachable or overloaded server, shutdown, a malformed
    batch), as opposed to a call that failed, which is a result for the model.

    code is the RPC's grpc.StatusCode (an attribute, not grpc's code()
    method); details what the server, or grpc for a local failure, said, on
    one line; str(e) is one line too: "toolwire: UNAUTHENTICATED: invalid
    bearer token". The grpc error it replaces is its __cause__."""

    def __init__(self, code, details):
        self.code = code
        self.details = " ".join(str(details).split())
        super().__init__(f"toolwire: {code.name}: {self.details}")

    @classmethod
    def from_rpc(cls, err):
        """A grpc.RpcError as a ToolwireError (UNKNOWN when it has no status)."""
        code = err.code() if callable(getattr(err, "code", None)) else None
        if not isinstance(code, grpc.StatusCode):
            return cls(grpc.StatusCode.UNKNOWN, str(err))
        details = err.details() if callable(getattr(err, "details", None)) else ""
        return cls(code, details or "")


class _Stream:
    """A grpc response stream whose RPC error is raised as a ToolwireError;
    everything else (cancel(), code(), metadata) is the grpc call's."""

    def __init__(self, call):
        self._call = call

    def __iter__(self):
        return self

    def __next__(self):
        try:
            return next(self._call)
        except grpc.RpcError as e:
            raise ToolwireError.from_rpc(e) from e

    def cancel(self):
        return self._call.cancel()

    def __getattr__(self, name):
        return getattr(self._call, name)


class _AsyncStream:
    """_Stream for grpc.aio: async iteration and read() raise ToolwireError."""

    def __init__(self, call):
        self._call = call
        self._it = None

    def __aiter__(self):
        return self

    async def __anext__(self):
        if self._it is None:
            self._it = self._call.__aiter__()
        try:
            return await self._it.__anext__()
        except grpc.RpcError as e:
            raise ToolwireError.from_rpc(e) from e

    async def read(self):
        try:
            return await self._call.read()
        except grpc.RpcError as e:
            raise ToolwireError.from_rpc(e) from e

    def cancel(self):
        return self._call.cancel()

    def __getattr__(self, name):
        return getattr(self._call, name)


# The status codes of a stream that dropped rather than failed: a detached
# batch's stream so ended is resumed with AttachBatch when the client
# re-attaches.
DROPPED = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN, grpc.StatusCode.ABORTED})


class _Reattaching:
    """A detached batch's events from the stream open() makes, resumed after
    a dropped stream with AttachBatch from the last seq seen (attach(id,
    after) opens it), up to attempts times in a row, sleeping backoff
    seconds (doubling, up to 5) before each; events seen before a drop are
    not yielded again. cancel() ends only this reader."""

    def __init__(self, open_stream, attach, batch_id, after, attempts, backoff):
        self._open, self._attach = open_stream, attach
        self._id, self._last = batch_id, after
        self._attempts, self._backoff = attempts, backoff
        self._call = None
        self._cancelled = False
        self._done = False

    def __iter__(self):
        return self

    def __next__(self):
        import time

        failures, backoff = 0, self._backoff
        while not self._done:
            if self._call is None:
                self._call = self._open()
            try:
                ev = next(self._call)
            except StopIteration:
                self._done = True
                break
            except grpc.RpcError as e:
                err = ToolwireError.from_rpc(e)
                if self._cancelled or failures >= self._attempts or not self._id or err.code not in DROPPED:
                    self._done = True
                    raise err from e
                failures += 1
                time.sleep(backoff)
                backoff = min(2 * backoff, 5.0)
                batch_id, after = self._id, self._last
                self._open = lambda: self._attach(batch_id, after)
                self._call = None
                continue
            if ev.seq and ev.seq <= self._last:
                continue
            self._last = ev.seq
            if ev.HasField("accepted") and not self._id:
                self._id = ev.accepted.batch_id
            if ev.HasField("finished"):
                self._done = True
            return ev
        raise StopIteration

    def cancel(self):
        self._cancelled = True
        self._done = True
        if self._call is not None:
            self._call.cancel()


class _AsyncReattaching:
    """_Reattaching for grpc.aio."""

    def __init__(self, open_stream, attach, batch_id, after, attempts, backoff):
        self._open, self._attach = open_stream, attach
        self._id, self._last = batch_id, after
        self._attempts, self._backoff = attempts, backoff
        self._call = None
        self._it = None
        self._cancelled = False
        self._done = False

    def __aiter__(self):
        return self

    async def __anext__(self):
        import asyncio

        failures, backoff = 0, self._backoff
        while not self._done:
            if self._call is None:
                self._call = self._open()
                self._it = self._call.__aiter__()
            try:
                ev = await self._it.__anext__()
            except StopAsyncIteration:
                self._done = True
                break
            except grpc.RpcError as e:
                err = ToolwireError.from_rpc(e)
                if self._cancelled or failures >= self._attempts or not self._id or err.code not in DROPPED:
                    self._done = True
                    raise err from e
                failures += 1
                await asyncio.sleep(backoff)
                backoff = min(2 * backoff, 5.0)
                batch_id, after = self._id, self._last
                self._open = lambda: self._attach(batch_id, after)
                self._call = None
                continue
            if ev.seq and ev.seq <= self._last:
                continue
            self._last = ev.seq
            if ev.HasField("accepted") and not self._id:
                self._id = ev.accepted.batch_id
            if ev.HasField("finished"):
                self._done = True
            return ev
        raise StopAsyncIteration

    def cancel(self):
        self._cancelled = True
        self._done = True
        if self._call is not None:
            self._call.cancel()
