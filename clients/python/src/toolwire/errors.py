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
