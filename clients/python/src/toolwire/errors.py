"""The one exception the package raises when talking to toolwire fails, the
delay a rate limit's refusal gives, and waiting it out."""

import asyncio
import threading
import time

import grpc

from toolwire._retry import retry_delay_of, trailing_metadata

# How many times a client waits out a rate limit's refusal unless its
# rate_limit_retries says otherwise.
DEFAULT_RATE_LIMIT_RETRIES = 3

# The longest delay (seconds) a refusal's RetryInfo may give for the client
# to wait it out: a longer one (a server's say-so of days) is raised at
# once, its delay in retry_delay, rather than holding the call for it.
MAX_RETRY_WAIT = 60.0


class ToolwireError(Exception):
    """An RPC to toolwire that failed: what the runtime must fix (a wrong or
    missing token, an unreachable or overloaded server, shutdown, a malformed
    batch), as opposed to a call that failed, which is a result for the model.

    code is the RPC's grpc.StatusCode (an attribute, not grpc's code()
    method); details what the server, or grpc for a local failure, said, on
    one line; str(e) is one line too: "toolwire: UNAUTHENTICATED: invalid
    bearer token". The grpc error it replaces is its __cause__. retry_delay:
    when the refusal says when to retry (a google.rpc.RetryInfo among its
    status details, as a server's rate limit sends with RESOURCE_EXHAUSTED),
    the delay in seconds; else None. batch: when collect raises it, the
    toolwire.Batch of what arrived (None for the results that did not), so
    a runtime can tell which calls did run; else None."""

    def __init__(self, code, details, retry_delay=None):
        self.batch = None
        self.code = code
        self.details = " ".join(str(details).split())
        self.retry_delay = retry_delay
        super().__init__(f"toolwire: {code.name}: {self.details}")

    @classmethod
    def from_rpc(cls, err):
        """A grpc.RpcError as a ToolwireError (UNKNOWN when it has no status)."""
        code = err.code() if callable(getattr(err, "code", None)) else None
        if not isinstance(code, grpc.StatusCode):
            return cls(grpc.StatusCode.UNKNOWN, str(err))
        details = err.details() if callable(getattr(err, "details", None)) else ""
        return cls(code, details or "", retry_delay_of(trailing_metadata(err)))


def retry_delay(err):
    """The delay in seconds that err's google.rpc.RetryInfo gives (a
    ToolwireError's retry_delay, also found in its __cause__ chain, or a
    grpc.RpcError's status details), or None when it has none."""
    for _ in range(8):
        if err is None:
            return None
        if isinstance(err, ToolwireError):
            return err.retry_delay
        if isinstance(err, grpc.RpcError):
            return retry_delay_of(trailing_metadata(err))
        err = err.__cause__
    return None


class _Retries:
    """A client's retry of refusals that say when to retry: how many
    (rate_limit_retries), who hears of each wait (on_rate_limit), and the
    deadline of timeout seconds from now (None: no deadline)."""

    def __init__(self, retries, on_rate_limit, timeout):
        self.retries = max(0, int(retries))
        self.on_rate_limit = on_rate_limit
        self.deadline = None if timeout is None else time.monotonic() + timeout

    def timeout(self):
        """What is left of the deadline, for the next attempt's timeout."""
        return None if self.deadline is None else max(0.0, self.deadline - time.monotonic())

    def delay(self, err, attempt):
        """How long to wait before sending the attempt-th refused RPC (from
        0) again, or None when it is not to be: not a rate limit's refusal,
        the retries spent, a delay over MAX_RETRY_WAIT, or a retry that
        would start past the deadline."""
        d = err.retry_delay
        if attempt >= self.retries or err.code != grpc.StatusCode.RESOURCE_EXHAUSTED or d is None or d > MAX_RETRY_WAIT:
            return None
        if self.deadline is not None and time.monotonic() + d >= self.deadline:
            return None
        if self.on_rate_limit is not None:
            self.on_rate_limit(err, d)
        return d


# How long a stream may stay open after its last event (BatchFinished)
# before the client cancels it.
FINISH_GRACE = 1.0


def is_finished(ev):
    """Whether ev is BatchFinished, a batch's last event."""
    return ev.HasField("finished")


def _end_call(call):
    """Ends a stream whose last event has arrived: its status, which a
    server keeping the contract sends at once, is waited for FINISH_GRACE
    seconds at most, then the call is cancelled, so that a server holding
    the stream open holds nothing."""
    done = threading.Event()
    call.add_done_callback(lambda _: done.set())
    if not done.wait(FINISH_GRACE):
        call.cancel()


async def _end_async_call(call):
    """_end_call for grpc.aio."""
    try:
        await asyncio.wait_for(call.code(), FINISH_GRACE)
    except asyncio.TimeoutError:
        call.cancel()


def _out_of_order(seq, last):
    return ToolwireError(
        grpc.StatusCode.INTERNAL,
        f"the server sent event seq {seq} after seq {last}: the batch's events are not in order (an event would be lost)",
    )


class _Stream:
    """A grpc response stream whose RPC error is raised as a ToolwireError;
    everything else (code(), metadata) is the grpc call's. start(timeout)
    makes the call; a refusal before any event that retries (a _Retries)
    says to wait out is waited out and the call made again. cancel() cancels
    the call, or ends such a wait with the refusal. An event last(ev) says
    is the stream's last ends it (see _end_call)."""

    def __init__(self, start, retries=None, last=None):
        self._start = start
        self._retries = retries
        self._last = last
        self._ended = False
        self._cancelled = threading.Event()
        self._first = True
        self._attempt = 0
        self._call = start(retries.timeout() if retries else None)

    def __iter__(self):
        return self

    def __next__(self):
        if self._ended:
            _end_call(self._call)
            raise StopIteration
        while True:
            try:
                ev = next(self._call)
            except grpc.RpcError as e:
                err = ToolwireError.from_rpc(e)
                # Refused before BatchAccepted: nothing ran.
                d = self._retries.delay(err, self._attempt) if self._first and self._retries and not self._cancelled.is_set() else None
                if d is None or self._cancelled.wait(d):
                    raise err from e
                self._attempt += 1
                self._call = self._start(self._retries.timeout())
                if self._cancelled.is_set():
                    self._call.cancel()
                continue
            self._first = False
            self._ended = self._last is not None and self._last(ev)
            return ev

    def cancel(self):
        self._cancelled.set()
        return self._call.cancel()

    def __getattr__(self, name):
        return getattr(self._call, name)


class _AsyncWaits:
    """A wait before a retry or a re-attach that cancel() ends at once."""

    _cancelled = False
    _wake = None  # set while waiting; _end_wait() sets it

    async def _wait(self, delay):
        """Waits delay seconds; False when cancel() ended the wait first."""
        self._wake = asyncio.Event()
        try:
            await asyncio.wait_for(self._wake.wait(), delay)
            return False
        except asyncio.TimeoutError:
            return not self._cancelled
        finally:
            self._wake = None

    def _end_wait(self):
        """Marks the stream cancelled and ends a wait under way."""
        self._cancelled = True
        if self._wake is not None:
            self._wake.set()


class _AsyncStream(_AsyncWaits):
    """_Stream for grpc.aio: async iteration and read() raise ToolwireError,
    and a refusal before any event is waited out as _Stream's is (cancel()
    ends the wait, as does cancelling the awaiting task)."""

    def __init__(self, start, retries=None, last=None):
        self._start = start
        self._retries = retries
        self._last = last
        self._ended = False
        self._first = True
        self._attempt = 0
        self._call = start(retries.timeout() if retries else None)

    def __aiter__(self):
        return self

    async def __anext__(self):
        ev = await self.read()
        if ev is grpc.aio.EOF:
            raise StopAsyncIteration
        return ev

    async def read(self):
        if self._ended:
            await _end_async_call(self._call)
            return grpc.aio.EOF
        while True:
            try:
                ev = await self._call.read()
            except grpc.RpcError as e:
                err = ToolwireError.from_rpc(e)
                d = self._retries.delay(err, self._attempt) if self._first and self._retries and not self._cancelled else None
                if d is None or not await self._wait(d):
                    raise err from e
                self._attempt += 1
                self._call = self._start(self._retries.timeout())
                continue
            self._first = False
            self._ended = ev is not grpc.aio.EOF and self._last is not None and self._last(ev)
            return ev

    def cancel(self):
        self._end_wait()
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
    after, timeout) opens it), up to attempts times in a row, sleeping
    backoff seconds (doubling, up to 5) before each; events seen before a
    drop are not yielded again, and one out of order (not the next seq)
    raises INTERNAL; a batch whose first event is unnumbered is a plain one
    (its server predates durable batches), yielded as it comes, its
    stream's end the batch's. retries (a _Retries) holds the one deadline
    of them all: each stream is opened (open(timeout)) with what is left of
    it, and a drop whose backoff would end past it is raised. A refusal
    before any event that retries says to wait out (a rate limit's) is
    waited out and the stream opened again, as _Stream does; cancel() ends
    that wait, raising the refusal. cancel() ends only this reader: the
    stream, or the wait before a re-attach, then raises CANCELLED. The
    stream ends at BatchFinished (see _end_call)."""

    def __init__(self, open_stream, attach, batch_id, after, attempts, backoff, retries):
        self._open, self._attach = open_stream, attach
        self._id, self._last = batch_id, after
        self._attempts, self._backoff = attempts, backoff
        self._retries = retries
        self._first, self._refusals = True, 0
        self._call = None
        self._cancelled = threading.Event()
        self._done = self._finished = False
        self._fresh = 0  # events the stream open now brought
        self._plain = False  # the server predates numbered events (see __next__)

    def __iter__(self):
        return self

    def __next__(self):
        if self._done and self._call is not None and self._finished:
            self._finished = False
            _end_call(self._call)
        failures, backoff = 0, self._backoff
        while not self._done:
            if self._cancelled.is_set():
                self._done = True
                raise _cancelled()
            if self._call is None:
                self._call = self._open(self._retries.timeout())
                self._fresh = 0
                if self._cancelled.is_set():
                    self._call.cancel()
            try:
                ev = next(self._call, None)
                if ev is None:
                    if not self._fresh or not self._id:
                        self._done = True
                        break
                    raise _EndedEarly()
            except grpc.RpcError as e:
                err = ToolwireError.from_rpc(e)
                # Refused before any event (a rate limit's refusal, with
                # RetryInfo): nothing ran; sent again after the delay.
                d = self._retries.delay(err, self._refusals) if self._first and not self._cancelled.is_set() else None
                if d is not None:
                    if self._cancelled.wait(d):
                        self._done = True
                        raise err from e
                    self._refusals += 1
                    self._call = None
                    continue
                if self._cancelled.is_set() or failures >= self._attempts or not self._id or err.code not in DROPPED or self._past_deadline(backoff):
                    self._done = True
                    raise err from e
                failures += 1
                if self._cancelled.wait(backoff):
                    self._done = True
                    raise _cancelled() from e
                backoff = min(2 * backoff, 5.0)
                batch_id, after = self._id, self._last
                self._open = lambda t: self._attach(batch_id, after, t)
                self._call = None
                continue
            self._first = False
            if self._plain or (not self._id and not self._last and not self._fresh and not ev.seq):
                # A server from before durable batches (met behind a
                # balancer in a rolling upgrade) numbers no events and
                # knows no detach: it runs the batch as a plain one, tied
                # to this stream, with nothing to re-attach to (the batch
                # ID stays unknown here, so none is tried). Its events are
                # yielded as a plain batch's are.
                self._plain = True
                if ev.HasField("finished"):
                    self._done = self._finished = True
                return ev
            if ev.seq and ev.seq <= self._last:
                continue  # seen before a drop
            if ev.seq != self._last + 1:
                # Events are numbered one after another: one that is not
                # the next means the server skipped or reordered some.
                self._done = True
                self._call.cancel()
                raise _out_of_order(ev.seq, self._last)
            self._last = ev.seq
            if ev.HasField("accepted") and not self._id:
                self._id = ev.accepted.batch_id
            self._fresh += 1
            if ev.HasField("finished"):
                self._done = self._finished = True
            return ev
        raise StopIteration

    def _past_deadline(self, backoff):
        """Whether an attach after backoff seconds would start past the
        deadline."""
        deadline = self._retries.deadline
        return deadline is not None and time.monotonic() + backoff >= deadline

    def cancel(self):
        self._cancelled.set()
        call = self._call
        if call is not None:
            call.cancel()


class _EndedEarly(grpc.RpcError):
    """A stream that brought events and ended without BatchFinished: cut
    short (a proxy or server that ended it as if done), so a re-attach
    has the rest. One that brought nothing ends the iteration (nothing
    follows, as after attach_batch from the last seq)."""

    def code(self):
        return grpc.StatusCode.UNAVAILABLE

    def details(self):
        return "the stream ended before BatchFinished"


def _cancelled():
    return ToolwireError(grpc.StatusCode.CANCELLED, "the stream was cancelled")


class _AsyncReattaching(_AsyncWaits):
    """_Reattaching for grpc.aio."""

    def __init__(self, open_stream, attach, batch_id, after, attempts, backoff, retries):
        self._open, self._attach = open_stream, attach
        self._id, self._last = batch_id, after
        self._attempts, self._backoff = attempts, backoff
        self._retries = retries
        self._first, self._refusals = True, 0
        self._call = None
        self._it = None
        self._done = self._finished = False
        self._fresh = 0  # events the stream open now brought
        self._plain = False  # the server predates numbered events (see __next__)

    def __aiter__(self):
        return self

    async def __anext__(self):
        if self._done and self._call is not None and self._finished:
            self._finished = False
            await _end_async_call(self._call)
        failures, backoff = 0, self._backoff
        while not self._done:
            if self._cancelled:
                self._done = True
                raise _cancelled()
            if self._call is None:
                self._call = self._open(self._retries.timeout())
                self._it = self._call.__aiter__()
                self._fresh = 0
            try:
                ev = await anext(self._it, None)
                if ev is None:
                    if not self._fresh or not self._id:
                        self._done = True
                        break
                    raise _EndedEarly()
            except grpc.RpcError as e:
                err = ToolwireError.from_rpc(e)
                # Refused before any event (a rate limit's refusal, with
                # RetryInfo): nothing ran; sent again after the delay.
                d = self._retries.delay(err, self._refusals) if self._first and not self._cancelled else None
                if d is not None:
                    if not await self._wait(d):
                        self._done = True
                        raise err from e
                    self._refusals += 1
                    self._call = None
                    continue
                if self._cancelled or failures >= self._attempts or not self._id or err.code not in DROPPED or self._past_deadline(backoff):
                    self._done = True
                    raise err from e
                failures += 1
                if not await self._wait(backoff):
                    self._done = True
                    raise _cancelled() from e
                backoff = min(2 * backoff, 5.0)
                batch_id, after = self._id, self._last
                self._open = lambda t: self._attach(batch_id, after, t)
                self._call = None
                continue
            self._first = False
            if self._plain or (not self._id and not self._last and not self._fresh and not ev.seq):
                # A server from before durable batches (met behind a
                # balancer in a rolling upgrade) numbers no events and
                # knows no detach: it runs the batch as a plain one, tied
                # to this stream, with nothing to re-attach to (the batch
                # ID stays unknown here, so none is tried). Its events are
                # yielded as a plain batch's are.
                self._plain = True
                if ev.HasField("finished"):
                    self._done = self._finished = True
                return ev
            if ev.seq and ev.seq <= self._last:
                continue  # seen before a drop
            if ev.seq != self._last + 1:
                # Events are numbered one after another: one that is not
                # the next means the server skipped or reordered some.
                self._done = True
                self._call.cancel()
                raise _out_of_order(ev.seq, self._last)
            self._last = ev.seq
            if ev.HasField("accepted") and not self._id:
                self._id = ev.accepted.batch_id
            self._fresh += 1
            if ev.HasField("finished"):
                self._done = self._finished = True
            return ev
        raise StopAsyncIteration

    def _past_deadline(self, backoff):
        """Whether an attach after backoff seconds would start past the
        deadline."""
        deadline = self._retries.deadline
        return deadline is not None and time.monotonic() + backoff >= deadline

    def cancel(self):
        self._end_wait()
        if self._call is not None:
            self._call.cancel()
