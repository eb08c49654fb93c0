"""Tool declarations and tool-result messages in OpenAI's and Anthropic's
formats, as plain dicts: what the `openai` and `anthropic` packages (and the
frameworks built on their formats) take, with no dependency on them."""

import base64
import json

from toolwire._calls import tool_message_text

_EMPTY_SCHEMA = {"type": "object", "properties": {}}


def _schema(tool):
    return json.loads(tool.input_schema) if tool.input_schema else dict(_EMPTY_SCHEMA)


# --- OpenAI Chat Completions -------------------------------------------------


def openai_tools(tools):
    """ListTools declarations as the "tools" of a chat request."""
    return [
        {"type": "function", "function": {"name": t.name, "description": t.description, "parameters": _schema(t)}}
        for t in tools
    ]


def from_openai_tool_calls(tool_calls):
    """An assistant message's tool_calls as toolwire calls (dicts for
    execute_batch or StepBatcher.execute), keeping the model's arguments
    text as it is."""
    calls = []
    for c in tool_calls:
        if c.get("type", "function") != "function":
            raise ValueError(f"tool call {c.get('id')!r}: type {c.get('type')!r} is not supported")
        args = c["function"].get("arguments") or ""
        if not isinstance(args, str):  # some compatible servers send the object
            args = json.dumps(args)
        calls.append({"call_id": c["id"], "name": c["function"]["name"], "arguments": args})
    return calls


def openai_tool_message(result):
    """A result as the tool message the model reads next. Tool messages have
    no error flag: a failed call's content is ERROR_PREFIX and its text
    ("Error: boom"), so the model can tell it from a call that returned
    "boom"."""
    return {"role": "tool", "tool_call_id": result.call_id, "content": tool_message_text(result)}


# --- Anthropic Messages ------------------------------------------------------


def anthropic_tools(tools):
    """ListTools declarations as the "tools" of a Messages request."""
    return [{"name": t.name, "description": t.description, "input_schema": _schema(t)} for t in tools]


def from_anthropic_tool_uses(content):
    """The tool_use blocks of an assistant message's content as toolwire
    calls."""
    return [
        {"call_id": b["id"], "name": b["name"], "arguments": json.dumps(b.get("input") or {})}
        for b in content
        if b.get("type") == "tool_use"
    ]


def anthropic_tool_result(result):
    """A result as a tool_result block; the user message that follows a
    tool_use turn carries one per call: {"role": "user", "content": [...]}.
    Images travel as image blocks, and is_error is set for failed calls.
    Empty text blocks are left out: the API refuses them."""
    content = []
    for block in result.content:
        if block.HasField("text"):
            if block.text.text:  # the API refuses an empty text block
                content.append({"type": "text", "text": block.text.text})
        elif block.HasField("image"):
            content.append(
                {
                    "type": "image",
                    "source": {
                        "type": "base64",
                        "media_type": block.image.mime_type,
                        "data": base64.b64encode(block.image.data).decode("ascii"),
                    },
                }
            )
    out = {"type": "tool_result", "tool_use_id": result.call_id, "content": content}
    if result.is_error:
        out["is_error"] = True
    return out
