"""toolwire's agent-loop example in Python, and the Python runner of the
conformance scenario in examples/scenario.json, on the toolwire package
(clients/python).

A scripted model (no LLM) answers in OpenAI Chat Completions format; its tool
calls go to toolwire as one ExecuteBatch per turn, and the results come back
as OpenAI tool messages, through toolwire's dict adapters: exactly what the
`openai` package's `client.chat.completions.create(messages=..., tools=...)`
takes, so nothing here needs that package.

Against a running `toolwire serve --diag`, with the toolwire wheel installed
(else the package's source in clients/python/src is used):

    /usr/bin/python3 examples/python/toolwire_agent.py [--addr 127.0.0.1:50051] [-v]
"""

import argparse
import json
import os
import re
import sys

try:
    import toolwire
except ImportError:  # a checkout without the wheel installed: use the package's source
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "clients", "python", "src"))
    import toolwire
from toolwire import from_openai_tool_calls, openai_tool_message, openai_tools, pb

DEFAULT_SCENARIO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scenario.json")


# --- The agent loop -----------------------------------------------------------


class BatchRecord:
    """What one batch's stream showed."""

    def __init__(self, calls):
        self.calls = calls
        self.position = {}
        for i, c in enumerate(calls):
            self.position.setdefault(c.call_id, i)
        self.letters = ""  # the events as A, S, P, R, F
        self.accepted = None
        self.finished = None
        self.per_call = {c.call_id: {"letters": "", "progress": [], "result": None} for c in calls}
        self.status = "OK"
        self.message = ""
        self.problems = []  # broken rules that hold for every batch

    def add(self, ev):
        kind = ev.WhichOneof("event")
        self.letters += {"accepted": "A", "started": "S", "progress": "P", "result": "R", "finished": "F"}[kind]
        if kind == "accepted":
            self.accepted = ev.accepted
            return
        if kind == "finished":
            self.finished = ev.finished
            return
        e = getattr(ev, kind)
        if e.call_id not in self.position:
            self.problems.append(f"{kind} event for call {e.call_id!r}, which is not in the batch")
            return
        if e.index != self.position[e.call_id]:
            self.problems.append(
                f"{kind} event for call {e.call_id!r} has index {e.index}, want {self.position[e.call_id]}"
            )
        rec = self.per_call[e.call_id]
        rec["letters"] += kind[0].upper()
        if kind == "started":
            lane = self.lane_of(e.call_id)
            if lane != e.lane:
                self.problems.append(f"call {e.call_id!r} started in lane {e.lane}; the plan puts it in lane {lane}")
        elif kind == "progress":
            prev = rec["progress"][-1] if rec["progress"] else None
            if prev and prev.HasField("progress") and e.HasField("progress") and e.progress < prev.progress:
                self.problems.append(f"call {e.call_id!r}: progress went back from {prev.progress} to {e.progress}")
            rec["progress"].append(e)
        elif kind == "result":
            rec["result"] = e
            want = self.calls[self.position[e.call_id]].name
            if e.tool_name != want:
                self.problems.append(f"result of call {e.call_id!r} names tool {e.tool_name!r}, want {want!r}")

    def lane_of(self, call_id):
        for lane in self.accepted.lanes if self.accepted else []:
            if call_id in lane.call_ids:
                return lane.index
        return -1

    def results(self):
        """The results in batch order, as the next model request needs them."""
        got = [r["result"] for r in self.per_call.values() if r["result"] is not None]
        return sorted(got, key=lambda r: r.index)


def run_batch(client, calls, cancel=None, timeout=60):
    """Executes calls as one batch, recording every event; cancels the RPC
    after the cancel["after_progress"]-th progress of cancel["call_id"]."""
    calls = [toolwire.to_call(c) for c in calls]
    rec = BatchRecord(calls)
    call = client.execute_batch(calls, timeout=timeout)
    try:
        for ev in call:
            rec.add(ev)  # a UI would show progress here
            if (
                cancel
                and ev.WhichOneof("event") == "progress"
                and ev.progress.call_id == cancel["call_id"]
                and len(rec.per_call.get(cancel["call_id"], {}).get("progress", [])) == cancel["after_progress"]
            ):
                call.cancel()  # and read on: the stream then ends with CANCELLED
    except toolwire.ToolwireError as err:
        rec.status, rec.message = err.code.name, err.details
    return rec


def run(client, scenario):
    """Plays the scenario's conversation against the server behind client.
    Returns the next chat request's body ({"messages", "tools"}) and the list
    of mismatches with the scenario's expectations; none means the server
    conforms."""
    chat = {"messages": [{"role": "user", "content": scenario["user"]}], "tools": []}
    mismatches = []
    steps = scenario["steps"]
    for i, step in enumerate(steps):
        fail = _prefixed(mismatches.append, step["name"] + ": ")
        if "list_tools" in step:
            try:
                listed = client.list_tools(timeout=10)
            except toolwire.ToolwireError as err:
                fail(f"ListTools: {err}")
                continue
            chat["tools"] = openai_tools(listed.tools)
            check_declarations(fail, step["list_tools"], listed.tools, chat["tools"])
        elif "assistant" in step:
            message = step["assistant"]
            if not message.get("tool_calls"):
                chat["messages"].append(message)  # the model answered in text: the loop ends
                if i + 1 < len(steps):
                    fail(f"{len(steps) - i - 1} steps follow the model's final answer")
                return chat, mismatches
            try:
                calls = from_openai_tool_calls(message["tool_calls"])
            except (KeyError, ValueError) as err:
                fail(str(err))
                continue
            rec = run_batch(client, calls, step.get("cancel"))
            if rec.status == "OK":
                # The model's message and an answer to each tool call, in the
                # order of the calls. A batch that did not finish (cancelled,
                # refused) leaves the conversation as it was.
                chat["messages"].append(message)
                chat["messages"].extend(openai_tool_message(r) for r in rec.results())
            for p in rec.problems:
                fail(p)
            if "expect" in step:
                check_batch(fail, step["expect"], rec)
        else:
            fail("neither list_tools nor assistant")
    mismatches.append("the scenario ends without the model's final answer")
    return chat, mismatches


# --- The checks ----------------------------------------------------------------


def _prefixed(fail, prefix):
    return lambda msg: fail(prefix + msg)


def check_declarations(fail, want, tools, decls):
    names = [t.name for t in tools]
    for w in want["tools_include"]:
        if w["name"] not in names:
            fail(f"tool {w['name']!r} is not declared")
            continue
        i = names.index(w["name"])
        if tools[i].annotations.read_only != w["read_only"]:
            fail(f"tool {w['name']!r}: read_only {tools[i].annotations.read_only}, want {w['read_only']}")
        d = decls[i]
        params = d["function"]["parameters"]
        if d["type"] != "function" or d["function"]["name"] != w["name"] or params.get("type") != "object":
            fail(f"tool {w['name']!r}: OpenAI declaration {json.dumps(d)} is not a function taking an object")
        for r in w.get("required", []):
            if r not in params.get("required", []):
                fail(f"tool {w['name']!r}: parameter {r!r} is not required")


FINISHED_COUNTS = ("succeeded", "failed", "skipped", "cancelled", "replayed")


def check_batch(fail, want, rec):
    want_status = want.get("rpc_status", "OK")
    if rec.status != want_status:
        fail(f"the RPC ended with {rec.status} ({rec.message!r}), want {want_status}")
    if want.get("rpc_message_contains", "") not in rec.message:
        fail(f"the RPC's message {rec.message!r} does not contain {want['rpc_message_contains']!r}")
    _matches(fail, "events", want.get("events"), rec.letters)
    if "lanes" in want:
        got = []
        for i, lane in enumerate(rec.accepted.lanes if rec.accepted else []):
            if lane.index != i:
                fail(f"lane {i} has index {lane.index}")
            got.append({"call_ids": list(lane.call_ids), "parallel": lane.parallel})
        if got != want["lanes"]:
            fail(f"lanes {json.dumps(got)}, want {json.dumps(want['lanes'])}")
    if "finished" in want:
        if rec.finished is None:
            fail("no finished event")
        got = {k: getattr(rec.finished, k) if rec.finished else 0 for k in FINISHED_COUNTS}
        for k, w in sorted(want["finished"].items()):
            if k not in got:
                fail(f"finished has no count {k!r}")
            elif got[k] != w:
                fail(f"finished {k} = {got[k]}, want {w} (got {json.dumps(got)})")
    for call_id, expects in sorted(want.get("calls", {}).items()):
        if call_id not in rec.per_call:
            fail(f"call {call_id!r} is not in the batch")
            continue
        check_call(_prefixed(fail, f"call {call_id}: "), expects, rec.per_call[call_id])


def check_call(fail, want, got):
    _matches(fail, "events", want.get("events"), got["letters"])
    progress = got["progress"]
    p = want.get("progress")
    if p and progress:
        if "total" in p:
            for ev in progress:
                if not ev.HasField("total") or ev.total != p["total"]:
                    fail(f"progress total {ev.total if ev.HasField('total') else None}, want {p['total']}")
                    break
        if "first_message" in p and progress[0].message != p["first_message"]:
            fail(f"first progress message {progress[0].message!r}, want {p['first_message']!r}")
        if p.get("last_message_contains", "") not in progress[-1].message:
            fail(f"last progress message {progress[-1].message!r} does not contain {p['last_message_contains']!r}")
    w = want.get("result")
    if w is None:
        return
    r = got["result"]
    if r is None:
        fail("no result")
        return
    if "is_error" in w and r.is_error != w["is_error"]:
        fail(f"is_error {r.is_error}, want {w['is_error']}")
    kind = pb.ErrorKind.Name(r.error_kind)
    if "error_kind" in w and kind != w["error_kind"]:
        fail(f"error_kind {kind}, want {w['error_kind']}")
    if "tool_name" in w and r.tool_name != w["tool_name"]:
        fail(f"tool_name {r.tool_name!r}, want {w['tool_name']!r}")
    # Texts are checked as the model will read them: in the tool message,
    # where a failed call's text follows toolwire.ERROR_PREFIX.
    msg = openai_tool_message(r)
    if msg["role"] != "tool" or msg["tool_call_id"] != r.call_id:
        fail(f"tool message {msg}")
    prefix = toolwire.ERROR_PREFIX if r.is_error else ""
    if not msg["content"].startswith(prefix):
        fail(f"text {msg['content']!r} of a failed call does not start with {prefix!r}")
    text = msg["content"][len(prefix):]
    if "text" in w and text != w["text"]:
        fail(f"text {text!r}, want {w['text']!r}")
    for sub in w.get("text_contains", []):
        if sub not in text:
            fail(f"text {text!r} does not contain {sub!r}")
    if "structured" in w or "structured_min" in w:
        try:
            structured = json.loads(r.structured_content)
        except ValueError as err:
            fail(f"structured_content {r.structured_content!r} is not JSON: {err}")
            return
        if "structured" in w and structured != w["structured"]:
            fail(f"structured_content {r.structured_content}, want {json.dumps(w['structured'])}")
        for k, least in sorted(w.get("structured_min", {}).items()):
            n = structured.get(k) if isinstance(structured, dict) else None
            if not isinstance(n, (int, float)) or isinstance(n, bool) or n < least:
                fail(f"structured_content {r.structured_content}: {k!r} is not a number of at least {least}")


def _matches(fail, what, pattern, letters):
    if pattern and not re.search(pattern, letters):
        fail(f"{what} {letters!r} do not match {pattern!r}")


def load_scenario(path=DEFAULT_SCENARIO):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--addr", default=os.environ.get("TOOLWIRE_ADDR", "127.0.0.1:50051"),
                    help="toolwire server address (default $TOOLWIRE_ADDR or 127.0.0.1:50051)")
    ap.add_argument("--scenario", default=DEFAULT_SCENARIO, help="scenario file")
    ap.add_argument("-v", action="store_true", help="print the final chat request (OpenAI messages and tools)")
    args = ap.parse_args(argv)
    scenario = load_scenario(args.scenario)
    with toolwire.Client(args.addr) as client:
        chat, mismatches = run(client, scenario)
    if args.v:
        print(json.dumps(chat, indent=2, ensure_ascii=False))
    for m in mismatches:
        print("MISMATCH", m)
    if mismatches:
        return 1
    print(f"scenario passed: {len(scenario['steps'])} steps, {len(chat['messages'])} messages in the conversation")
    return 0


if __name__ == "__main__":
    sys.exit(main())
