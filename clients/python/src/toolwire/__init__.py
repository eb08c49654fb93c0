"""toolwire's Python client.

Client (blocking) and AsyncClient (asyncio) over grpcio, with the Go
client's surface: list_tools (a page at a time), search_tools, execute_batch, collect (batch order),
call_tool (one unary CallTool), watch_tools, bearer tokens and TLS. StepBatcher gathers the tool
calls an asyncio framework runs at once into one ExecuteBatch, so toolwire's
lanes apply to the model's step. toolwire.adapters converts declarations and
results to and from OpenAI's and Anthropic's formats as plain dicts. The
generated stubs are toolwire.v1.toolwire_pb2 and toolwire_pb2_grpc.

A failed RPC (a wrong token, an unreachable server, overload, shutdown, a
malformed batch) raises ToolwireError, with .code (grpc.StatusCode) and a
one-line message; a failed call is a result (is_error) for the model. A rate
limit's refusal (RESOURCE_EXHAUSTED with a google.rpc.RetryInfo) is waited
out and sent again, rate_limit_retries=3 times by default; retry_delay(err)
reads its delay."""

from toolwire._calls import ERROR_PREFIX, Batch, result_text, to_call, tool_message_text
from toolwire.adapters import (
    anthropic_tool_result,
    anthropic_tools,
    from_anthropic_tool_uses,
    from_openai_tool_calls,
    openai_tool_message,
    openai_tools,
)
from toolwire.aio import AsyncClient, StepBatcher
from toolwire.client import Client
from toolwire.errors import DEFAULT_RATE_LIMIT_RETRIES, ToolwireError, retry_delay
from toolwire.v1 import toolwire_pb2 as pb

__all__ = [
    "DEFAULT_RATE_LIMIT_RETRIES",
    "ERROR_PREFIX",
    "AsyncClient",
    "Batch",
    "Client",
    "StepBatcher",
    "ToolwireError",
    "anthropic_tool_result",
    "anthropic_tools",
    "from_anthropic_tool_uses",
    "from_openai_tool_calls",
    "openai_tool_message",
    "openai_tools",
    "pb",
    "result_text",
    "retry_delay",
    "to_call",
    "tool_message_text",
]
