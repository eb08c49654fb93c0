"""What the sync and asyncio clients share: building calls and credentials,
and reading a batch's events into results in batch order."""

import json
from dataclasses import dataclass, field

import grpc

from toolwire.errors import ToolwireError
from toolwire.v1 import toolwire_pb2 as pb


def to_call(call):
    """Returns a pb.ToolCall for a pb.ToolCall or a dict with call_id, name,
    arguments (JSON text exactly as the model produced it, or a value to
    encode as JSON; default {}) and optionally idempotency_key and timeout
    (seconds)."""
    if isinstance(call, pb.ToolCall):
        return call
    args = call.get("arguments")
    out = pb.ToolCall(
        call_id=call["call_id"],
        name=call["name"],
        arguments=args if isinstance(args, str) else json.dumps({} if args is None else args),
        idempotency_key=call.get("idempotency_key", ""),
    )
    if call.get("timeout") is not None:
        out.timeout.FromMilliseconds(int(call["timeout"] * 1000))
    return out


def batch_request(calls, session_id="", options=None):
    return pb.ExecuteBatchRequest(calls=[to_call(c) for c in calls], session_id=session_id, options=options)


def call_tool_request(name, arguments, call_id, session_id, idempotency_key, call_timeout):
    """The pb.CallToolRequest of call_tool's arguments (see to_call)."""
    call = {"call_id": call_id, "name": name, "arguments": arguments, "idempotency_key": idempotency_key, "timeout": call_timeout}
    return pb.CallToolRequest(call=to_call(call), session_id=session_id)


# What a tool message without an error flag (OpenAI tool messages, the
# OpenAI Agents SDK's function outputs, LangChain's ToolMessage text) starts
# with when the call failed, so the model can tell "Error: boom" (the call
# failed saying boom) from "boom" (the call returned boom).
ERROR_PREFIX = "Error: "


def result_text(result):
    """The text of a result: its text blocks, one per line, and a note for
    each image (chat tool messages carry text only). It does not say whether
    the call failed: see is_error, and tool_message_text."""
    parts = []
    for block in result.content:
        if block.HasField("text"):
            parts.append(block.text.text)
        elif block.HasField("image"):
            parts.append(
                f"[image ({block.image.mime_type}, {len(block.image.data)} bytes) left out: "
                "tool messages carry text only]"
            )
    return "\n".join(parts)


def tool_message_text(result):
    """A result's text for a tool message without an error flag: result_text,
    after ERROR_PREFIX when the call failed."""
    text = result_text(result)
    return ERROR_PREFIX + text if result.is_error else text


@dataclass
class Batch:
    """What one ExecuteBatch stream showed: its plan, one result per planned
    call in batch order (by CallResult.index; None for a call whose result
    did not arrive), and its summary."""

    accepted: "pb.BatchAccepted | None" = None
    results: list = field(default_factory=list)  # in batch order
    finished: "pb.BatchFinished | None" = None
    # call ID -> its place in the plan (its lanes in order: batch order)
    _planned: dict = field(default_factory=dict, repr=False, compare=False)

    def add(self, ev):
        """Adds an event; a result that does not fit the plan (before
        BatchAccepted, an index past the batch's calls, a call not in the
        plan, an index other than its call's place in the plan, a second
        result for a call), a second BatchAccepted or a plan that lists a
        call twice raises ToolwireError INTERNAL."""
        kind = ev.WhichOneof("event")
        if kind == "accepted":
            if self.accepted is not None:
                raise _bad("a second BatchAccepted")
            self.accepted = ev.accepted
            for lane in ev.accepted.lanes:
                for i in lane.call_ids:
                    if i in self._planned:
                        raise _bad(f"the plan lists call {json.dumps(i)} twice")
                    self._planned[i] = len(self._planned)
            self.results = [None] * len(self._planned)
        elif kind == "result":
            r = ev.result
            cid = json.dumps(r.call_id)
            if self.accepted is None:
                raise _bad(f"result for call {cid} before BatchAccepted")
            if r.index >= len(self.results):
                raise _bad(f"result for call {cid} has index {r.index}; the batch has {len(self.results)} calls")
            place = self._planned.get(r.call_id)
            if place is None:
                raise _bad(f"result for call {cid}, which is not in the plan")
            # A result is its call's by its ID: one whose index says another
            # place would be read as another call's.
            if r.index != place:
                raise _bad(f"result for call {cid} has index {r.index}; its place in the plan is {place}")
            if self.results[r.index] is not None:
                raise _bad(f"second result for call {cid}")
            self.results[r.index] = r
        elif kind == "finished":
            self.finished = ev.finished

    def check_complete(self):
        """Raises ToolwireError INTERNAL unless the stream showed
        BatchAccepted, a result for every planned call and BatchFinished."""
        if self.accepted is None:
            raise _bad("stream ended without BatchAccepted")
        missing = sorted(i for i, place in self._planned.items() if self.results[place] is None)
        if missing:
            raise _bad(f"stream ended without results for calls {_listed(missing)}")
        if self.finished is None:
            raise _bad("stream ended without BatchFinished")


def call_result(req, resp):
    """resp's result, the answer to req's call; a response without one, or
    with another call's (which a runtime would hand its model as that
    call's answer), raises ToolwireError INTERNAL."""
    cid = json.dumps(req.call.call_id)
    if not resp.HasField("result"):
        raise _bad(f"CallTool for call {cid} returned no result")
    if resp.result.call_id != req.call.call_id:
        raise _bad(f"CallTool for call {cid} returned the result of call {json.dumps(resp.result.call_id)}")
    return resp.result


# How many call IDs an error names: a plan is the server's, and one of a
# million calls would make a message of megabytes.
MAX_LISTED = 20


def _listed(ids):
    """ids as JSON, the first MAX_LISTED of them and how many more."""
    if len(ids) <= MAX_LISTED:
        return json.dumps(ids)
    return f"{json.dumps(ids[:MAX_LISTED])} and {len(ids) - MAX_LISTED} more"


def _bad(what):
    return ToolwireError(grpc.StatusCode.INTERNAL, what)


def collect_failed(batch, err, events):
    """err, a ToolwireError that ends collect, carrying batch (what arrived);
    events (the stream) is cancelled."""
    err.batch = batch
    cancel = getattr(events, "cancel", None)
    if cancel is not None:
        cancel()
    return err


class _Token(grpc.AuthMetadataPlugin):
    def __init__(self, token):
        self._md = (("authorization", f"Bearer {token}"),)

    def __call__(self, context, callback):
        callback(self._md, None)


def channel_args(target, token=None, tls=None, insecure_token=False):
    """Returns (credentials or None for plaintext, interceptor metadata) for
    the options every client takes. tls is True for the system's roots or a
    grpc.ChannelCredentials; a token needs TLS unless insecure_token is set
    (then it travels as plain metadata on each call)."""
    if tls is True:
        tls = grpc.ssl_channel_credentials()
    if token and not tls and not insecure_token:
        raise ValueError("toolwire: a token needs TLS; set insecure_token=True to send it over plaintext")
    if tls is None:
        return None, ((("authorization", f"Bearer {token}"),) if token else ())
    if token:
        tls = grpc.composite_channel_credentials(tls, grpc.metadata_call_credentials(_Token(token)))
    return tls, ()


# The tools list_tools asks for per page unless told otherwise: the most a
# server's page holds.
DEFAULT_PAGE_SIZE = 1000
# How many times list_tools starts over when the tools change between its
# pages (the server answers ABORTED).
LIST_RESTARTS = 3
# The largest message a client receives unless its options say otherwise
# ("grpc.max_receive_message_length"): a listing's page stays within the
# server's max_message_bytes (4 MiB by default, grpcio's own limit), but one
# holding a very large declaration, or an old server's whole listing, may be
# as large as a server sends in one (its max_list_bytes, 64 MiB by default).
LIST_RECEIVE_BYTES = 64 << 20


# Keepalive: a connection that dies silently (a NAT or load balancer that
# forgets it, a host that goes away) sends no error, and without pings a
# stream on it waits for its timeout, which a stream of a long batch may not
# have, and reattach never hears of the drop. The client pings after 30 s
# without reads (a server refuses pings more frequent than its
# keepalive_min_time, 10 s by default) and drops the connection, failing its
# calls with UNAVAILABLE, when a ping is not answered in 10 s. It pings only
# while a call is open (an idle connection is the server's to close), and
# goes on pinging however long a call stays quiet (a tool running for
# minutes): grpc's default stops after 2 pings without data.
KEEPALIVE_OPTIONS = (
    ("grpc.keepalive_time_ms", 30_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.keepalive_permit_without_calls", 0),
    ("grpc.http2.max_pings_without_data", 0),
)


def channel_options(options):
    """options (grpc channel options, a sequence of (key, value)) with the
    receive limit listings need and KEEPALIVE_OPTIONS, each unless options
    set it."""
    options = list(options or ())
    defaults = (("grpc.max_receive_message_length", LIST_RECEIVE_BYTES),) + KEEPALIVE_OPTIONS
    for key, value in defaults:
        if not any(k == key for k, _ in options):
            options.append((key, value))
    return options


def list_request(page_size, page_token):
    """A page's request: page_size tools (DEFAULT_PAGE_SIZE when None or
    0 or less, as the Go client's WithListPageSize) after page_token."""
    return pb.ListToolsRequest(page_size=page_size if page_size and page_size > 0 else DEFAULT_PAGE_SIZE, page_token=page_token)


# What one listing reads at most unless list_tools is told otherwise: the
# most a server lists in one response (its max_list_bytes default), and
# pages enough for ten million tools at the default page size.
DEFAULT_LIST_BYTES = 64 << 20
DEFAULT_LIST_PAGES = 10_000


class Pages:
    """One listing's pages put together in listing (a pb.ListToolsResponse),
    within its bounds: max_bytes of responses and max_pages pages (their
    defaults when None or 0 or less), and no page token twice."""

    def __init__(self, page_size=None, max_bytes=None, max_pages=None):
        self.listing = pb.ListToolsResponse()
        self.page_size = page_size
        self.max_bytes = max_bytes if max_bytes and max_bytes > 0 else DEFAULT_LIST_BYTES
        self.max_pages = max_pages if max_pages and max_pages > 0 else DEFAULT_LIST_PAGES
        self.page = 0
        self.read = 0
        self.tokens = set()

    def request(self):
        """The next page's request."""
        return list_request(self.page_size, self.listing.next_page_token)

    def add(self, resp):
        """Adds the next page, resp; returns whether there are more (see
        add_page). Past a bound it raises RESOURCE_EXHAUSTED; a page token
        named before raises INTERNAL."""
        self.page += 1
        self.read += resp.ByteSize()
        if self.read > self.max_bytes:
            raise ToolwireError(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"ListTools read {self.page} pages, more than {self.max_bytes >> 20} MiB, without reaching the last: "
                "the listing is larger than the client's bound (max_bytes)",
            )
        if not add_page(self.listing, resp, self.page):
            return False
        token = self.listing.next_page_token
        if token in self.tokens:
            raise ToolwireError(grpc.StatusCode.INTERNAL, f"page {self.page} of ListTools names a page token it named before: the server's pages do not advance")
        self.tokens.add(token)
        if self.page >= self.max_pages:
            raise ToolwireError(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"ListTools read {self.page} pages without reaching the last: the listing is longer than the client's bound (max_pages)",
            )
        return True


def add_page(listing, resp, page):
    """Adds page number page (from 1), resp, to listing, a
    pb.ListToolsResponse of the pages before it; returns whether there are
    more (listing.next_page_token then asks for the next). A page of
    another revision raises ABORTED (the tools changed between pages); a
    page that does not go on after the last (a server whose pages would
    keep list_tools going forever) raises INTERNAL, unless it is a whole
    listing, from the first tool with no next page: a server that predates
    paging answers so whichever page it is asked for, and the listing is
    that answer."""
    if page > 1 and not resp.next_page_token and resp.tools and listing.tools and resp.tools[0].name <= listing.tools[0].name:
        # A page from the start and the last: a server that predates
        # paging, which a balancer sent this page to in a rolling upgrade,
        # answers a page token with every tool. That answer is the whole
        # listing, of one revision.
        listing.CopyFrom(resp)
        return False
    if page == 1:
        listing.revision = resp.revision
    elif resp.revision != listing.revision:
        raise ToolwireError(grpc.StatusCode.ABORTED, f"the tools changed between pages (revision {listing.revision}, then {resp.revision})")
    last = listing.tools[-1].name if listing.tools else None
    if (resp.tools and last is not None and resp.tools[0].name <= last) or (not resp.tools and resp.next_page_token):
        raise ToolwireError(
            grpc.StatusCode.INTERNAL,
            f"page {page} of ListTools does not go on after {json.dumps(last or '')}: the server's pages do not advance",
        )
    listing.tools.extend(resp.tools)
    listing.next_page_token = resp.next_page_token
    return bool(resp.next_page_token)
