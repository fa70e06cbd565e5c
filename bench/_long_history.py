"""Long sessions: the gateway's CPU per turn as the history grows (`bench/gateway.py --scenario long`).

An agent loop of tool-calling turns: every reply is a tool call (a fixed sampler, no model), every
tool output is about `--lines` x 37 tokens of build log, new text in every conversation (so no
tokenisation is found cached), so a 200-turn session with 300-token outputs carries ~60k tokens
of history. The SmolLM2 tokenizer with the packaged tool template (`chatml_tools`) renders it.

What is measured: the CPU of turns around turn 10 (`near`) and around turn 200 (`far`), in
windows of 2 x half + 1 turns, never the wall clock. Noise on a shared machine moves with time,
so the windows are taken together: per repeat, each cell (a wire, or the turn path, at near or
far) gets a fresh conversation, played unmeasured up to its window, and then the cells take their
measured turns in turn (round robin, the order rotated every step), so turn 10 and turn 200 of
every wire are measured side by side, under the same load. The ratio is median(far) / median(near)
over every measured turn of every repeat.

Wires: `chat` (Chat Completions `messages`), `anthropic` (Messages: `system` and `messages`, tool
results as `tool_result` blocks) and `responses` (Responses `instructions` and `input` items, the
reply's output items re-sent as they came, `function_call_output` items). Each agent re-sends its
whole history every turn, serialised with `json.dumps` as the SDKs do.

Roles:
  serve   python bench/_long_history.py serve --sessions S --lines N
          start the gateway, open S sessions, print one JSON line (base URL, pid, session keys),
          then serve until a line on stdin; print one JSON line per finished session (traces,
          forks, drift). The driver (`measure`, in `bench/gateway.py`'s process) sends the turns
          over raw HTTP/1.1 and reads the server's CPU (all its threads, Linux schedstat, ns) from
          /proc before each turn and once its answer is in and the server has gone idle: the
          driver's own work is in another process and does not count.
  path    the turn path alone (`prepare_turn` + `sample_turn`: render, tokenise, turn tree; no
          HTTP, no wire parsing), thread CPU per turn, given the messages as the chat route hands
          them over (untimed: its known messages are the objects it already holds,
          `gateway/known_history.py`), the same near/far windows in one process
  path-fresh  the same with every message translated anew each turn (as every wire did before
          its known history): the turn tree compares each one with what it holds
`serve` and `path` use whichever `agentcore_rl_harness` is on the path, so `bench/gateway.py` can
run them against another checkout's `src` (`--baseline-src`) in the same run.
"""


from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol
from urllib.parse import urlsplit

SYSTEM = "You are a build agent. Use the shell tool until the build is green."
TASK = "The build of project atlas fails. Find out why and fix it."
TOOLS = [{"type": "function", "function": {
    "name": "shell", "description": "Run a shell command and return its output.",
    "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}}}]
CALL = '<tool_call>\n{"name": "shell", "arguments": {"cmd": "make -k step"}}\n</tool_call>'


def tool_output(turn: int, lines: int, salt: int = 0) -> str:
    """About 37 tokens a line of plausible build log, different for every turn and `salt`."""
    return "\n".join(f"[{salt:03d}.{turn:04d}.{i:02d}] cc -O2 -c src/module_{(turn * 7 + i) % 113}.c -o "
                     f"build/m{i}.o ({(turn * 31 + i * 17 + salt * 13) % 997} ms) ok" for i in range(lines))


def process_cpu_ns(pid: int) -> int:
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as file:
                total += int(file.read().split()[0])
        except (OSError, ValueError):
            continue  # a thread that just ended
    return total


def _read_response(sock_file) -> tuple[int, bytes]:
    status_line = sock_file.readline()
    status = int(status_line.split()[1])
    length = 0
    while True:
        line = sock_file.readline()
        if line in (b"\r\n", b""):
            break
        name, _, value = line.decode("latin-1").partition(":")
        if name.strip().lower() == "content-length":
            length = int(value)
    return status, sock_file.read(length)


ANTHROPIC_TOOLS = [{"name": "shell", "description": "Run a shell command and return its output.",
                    "input_schema": TOOLS[0]["function"]["parameters"]}]
RESPONSES_TOOLS = [{"type": "function", **TOOLS[0]["function"]}]
WIRES = ("chat", "anthropic", "responses")


class Conversation:
    """One agent's history on one wire: the next request body, and the reply folded in."""

    def __init__(self, wire: str, lines: int, salt: int = 0) -> None:
        self.wire, self.lines, self.salt = wire, lines, salt
        if wire == "chat":
            self.path, self.history = "/chat/completions", [{"role": "system", "content": SYSTEM},
                                                            {"role": "user", "content": TASK}]
        elif wire == "anthropic":
            self.path, self.history = "/messages", [{"role": "user", "content": TASK}]
        else:
            self.path, self.history = "/responses", [{"type": "message", "role": "user", "content": TASK}]

    def body(self) -> bytes:
        if self.wire == "chat":
            return json.dumps({"model": "policy", "messages": self.history, "tools": TOOLS}).encode()
        if self.wire == "anthropic":
            return json.dumps({"model": "policy", "max_tokens": 256, "system": SYSTEM, "messages": self.history,
                               "tools": ANTHROPIC_TOOLS}).encode()
        return json.dumps({"model": "policy", "instructions": SYSTEM, "input": self.history,
                           "tools": RESPONSES_TOOLS}).encode()

    def answered(self, answer: bytes, turn: int) -> None:
        reply, output = json.loads(answer), tool_output(turn, self.lines, self.salt)
        if self.wire == "chat":
            message = reply["choices"][0]["message"]
            self.history.append({k: v for k, v in message.items() if v is not None})
            for call in message.get("tool_calls") or ():
                self.history.append({"role": "tool", "tool_call_id": call["id"], "content": output})
        elif self.wire == "anthropic":
            self.history.append({"role": "assistant", "content": reply["content"]})
            results = [{"type": "tool_result", "tool_use_id": block["id"], "content": output}
                       for block in reply["content"] if block["type"] == "tool_use"]
            self.history.append({"role": "user", "content": results or "Go on."})
        else:
            self.history += reply["output"]
            calls = [item for item in reply["output"] if item["type"] == "function_call"]
            self.history += [{"type": "function_call_output", "call_id": item["call_id"], "output": output}
                             for item in calls] or [{"type": "message", "role": "user", "content": "Go on."}]


LINES = 8  # tool output lines (~37 tokens each)
SETTLE_S = 0.002  # after an answer, how long the server must stay idle for its turn to count as done


class Turns(Protocol):
    """One conversation of one cell: `step()` plays its next turn and returns its CPU ms."""

    def step(self) -> float: ...


def measure(cells: Sequence[Any], start: Callable[[Any, int, int], Turns], *, near: int, far: int, half: int,
            repeats: int) -> dict[tuple[Any, int], list[list[float]]]:
    """Per (cell, mark) and repeat, the CPU ms of turns mark-half..mark+half (1-based). Each repeat
    starts a fresh conversation per (cell, mark) (`start(cell, mark, salt)`), plays it unmeasured
    up to its window, then measures the windows' turns side by side: one turn of every (cell,
    mark) in turn, the order rotated every step."""
    if not 0 < half < near < far:
        raise SystemExit(f"windows {near}+-{half} and {far}+-{half}: need 0 < half < near < far")
    samples: dict[tuple[Any, int], list[list[float]]] = {(cell, mark): [] for cell in cells for mark in (near, far)}
    keys = list(samples)
    for repeat in range(repeats):
        conversations = {key: start(key[0], key[1], repeat * len(keys) + index) for index, key in enumerate(keys)}
        for (cell, mark), conversation in conversations.items():
            for _ in range(mark - half - 1):
                conversation.step()
        window: dict[tuple[Any, int], list[float]] = {key: [] for key in keys}
        for step in range(2 * half + 1):
            for key in keys[step % len(keys):] + keys[:step % len(keys)]:
                window[key].append(conversations[key].step())
        for key, values in window.items():
            samples[key].append(values)
    return samples


def _settled_cpu_ns(pid: int) -> int:
    """The server's CPU once it has been idle for SETTLE_S (trailing work of a turn finished)."""
    before = process_cpu_ns(pid)
    for _ in range(50):
        time.sleep(SETTLE_S)
        now = process_cpu_ns(pid)
        if now == before:
            return now
        before = now
    return before


class HttpTurns:
    """A conversation on one wire with a served gateway (`serve`), over one raw HTTP/1.1 connection."""

    def __init__(self, connection: "Connection", session_id: str, wire: str, lines: int, salt: int) -> None:
        self.connection, self.session_id = connection, session_id
        self.conversation, self.turn = Conversation(wire, lines, salt), 0

    def step(self) -> float:
        connection, body = self.connection, self.conversation.body()
        head = (f"POST {connection.path}{self.conversation.path} HTTP/1.1\r\nHost: {connection.host}\r\n"
                f"Content-Type: application/json\r\nAuthorization: Bearer {self.session_id}\r\n"
                f"Content-Length: {len(body)}\r\n\r\n").encode()
        before = _settled_cpu_ns(connection.pid)
        connection.sock.sendall(head + body)
        status, answer = _read_response(connection.sock_file)
        after = _settled_cpu_ns(connection.pid)
        if status != 200:
            raise SystemExit(f"{self.conversation.wire} turn {self.turn + 1}: HTTP {status}: {answer[:500]!r}")
        self.conversation.answered(answer, self.turn)
        self.turn += 1
        return (after - before) / 1e6


class Connection:
    """A `serve` process: its base URL, pid, unused session keys and one keep-alive connection."""

    def __init__(self, base_url: str, pid: int, session_ids: list[str]) -> None:
        parts = urlsplit(base_url)
        self.host, self.path, self.pid, self.session_ids = parts.hostname, parts.path.rstrip("/"), pid, session_ids
        self.sock = socket.create_connection((parts.hostname, parts.port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock_file = self.sock.makefile("rb")

    def close(self) -> None:
        self.sock_file.close()
        self.sock.close()


def serve(sessions: int, lines: int) -> None:
    """Serve `sessions` sessions until a line on stdin (see the module docstring)."""
    import dataclasses

    from agentcore_rl_harness.gateway.rendering import ChatTemplateRenderer, load_template
    from agentcore_rl_harness.gateway.server import GatewayConfig, GatewayServer
    from agentcore_rl_harness.models import load_tokenizer, prepare_model
    from agentcore_rl_harness.records import FinishReason, SampleResult

    renderer = ChatTemplateRenderer(load_tokenizer(prepare_model("tiny")), chat_template=load_template())
    reply_ids = (*renderer.encode(CALL), renderer.stop_token_ids[0])
    result = SampleResult(reply_ids, (-0.1,) * len(reply_ids), FinishReason.STOP)

    class FixedSampler:
        async def sample(self, *, prompt_token_ids, params, on_token=None):
            return result

    unlimited = {"max_turns": None, "idle_ttl_s": None, "max_lifetime_s": None, "session_ttl_s": None}
    fields = {f.name for f in dataclasses.fields(GatewayConfig)}
    config = GatewayConfig(gc_freeze=True, **{k: v for k, v in unlimited.items() if k in fields})
    with GatewayServer(sampler=FixedSampler(), renderer=renderer, model_id="policy", config=config) as server:
        opened = [server.sessions.open() for _ in range(sessions)]
        print(json.dumps({"base_url": server.base_url, "pid": os.getpid(), "session_ids": opened}), flush=True)
        sys.stdin.readline()
        for session_id in opened:
            finished = server.sessions.finish(session_id)
            print(json.dumps({"traces": len(finished.traces), "forks": finished.metadata["forks"],
                              "drift_events": finished.metadata["drift_events"],
                              "tokens": max((len(trace.token_ids) for trace in finished.traces), default=0)}),
                  flush=True)


class PathTurns:
    """A conversation through the turn path alone (`prepare_turn` + `sample_turn`), thread CPU per
    turn, given the internal messages the chat route hands over (its known messages as the
    objects it already holds), or with `fresh` every message translated anew (as a wire without
    its known history would)."""

    def __init__(self, kit: dict[str, Any], lines: int, salt: int, *, fresh: bool) -> None:
        from agentcore_rl_harness.gateway.sessions import SessionStore

        store = SessionStore(renderer=kit["renderer"])
        self.kit, self.lines, self.salt, self.fresh = kit, lines, salt, fresh
        self.session = store.get(store.open())
        self.messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": TASK}]
        self.turn = 0

    def step(self) -> float:
        from agentcore_rl_harness.gateway import openai_wire
        from agentcore_rl_harness.gateway.messages import chat_tools
        from agentcore_rl_harness.gateway.turn import RequestedSampling, prepare_turn, sample_turn

        kit = self.kit
        if self.fresh or kit["chat_request"] is None:
            internal, tools = openai_wire.to_internal(self.messages), chat_tools(TOOLS)
        else:
            body, internal = kit["chat_request"](kit["context"], self.session,
                                                 {"messages": list(self.messages), "tools": TOOLS})
            tools = chat_tools(body.tools)
        start = time.thread_time_ns()
        prepared = prepare_turn(session=self.session, renderer=kit["renderer"], messages=internal, tools=tools,
                                requested=RequestedSampling())
        kit["loop"].run_until_complete(sample_turn(prepared, sampler=kit["sampler"], renderer=kit["renderer"]))
        cpu = (time.thread_time_ns() - start) / 1e6
        call_id = f"call_{self.turn}"
        self.messages.append({"role": "assistant", "content": "", "tool_calls": [{"id": call_id, "type": "function",
                              "function": {"name": "shell", "arguments": '{"cmd": "make -k step"}'}}]})
        self.messages.append({"role": "tool", "tool_call_id": call_id,
                              "content": tool_output(self.turn, self.lines, self.salt)})
        self.turn += 1
        return cpu


def turn_path(*, near: int, far: int, half: int, repeats: int, lines: int, fresh: bool) -> dict:
    """`measure` of the turn path alone (`PathTurns`), in this process."""
    import asyncio
    import gc

    from agentcore_rl_harness.gateway.rendering import ChatTemplateRenderer, load_template
    from agentcore_rl_harness.models import load_tokenizer, prepare_model
    from agentcore_rl_harness.records import FinishReason, SampleResult

    renderer = ChatTemplateRenderer(load_tokenizer(prepare_model("tiny")), chat_template=load_template())
    reply_ids = (*renderer.encode(CALL), renderer.stop_token_ids[0])
    result = SampleResult(reply_ids, (-0.1,) * len(reply_ids), FinishReason.STOP)

    class FixedSampler:
        async def sample(self, *, prompt_token_ids, params, on_token=None):
            return result

    try:  # the chat route's translation: what it hands the turn path (untimed)
        from agentcore_rl_harness.gateway.openai_routes import chat_request
    except ImportError:  # a checkout from before known_history.py: it translated every message
        chat_request = None

    class Context:
        check_history = True

    gc.collect()
    gc.freeze()  # as the served gateway does (GatewayConfig.gc_freeze)
    kit = {"renderer": renderer, "sampler": FixedSampler(), "chat_request": chat_request, "context": Context(),
           "loop": asyncio.new_event_loop()}
    samples = measure(["path"], lambda cell, mark, salt: PathTurns(kit, lines, salt, fresh=fresh),
                      near=near, far=far, half=half, repeats=repeats)
    kit["loop"].close()
    return {"cpu_ms": {str(mark): windows for (_, mark), windows in samples.items()}}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("role", choices=["serve", "path", "path-fresh"])
    parser.add_argument("--lines", type=int, default=LINES, help="tool output lines (~37 tokens each)")
    parser.add_argument("--sessions", type=int, default=6, help="serve: sessions to open")
    parser.add_argument("--near", type=int, default=10)
    parser.add_argument("--far", type=int, default=200)
    parser.add_argument("--half", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    if args.role == "serve":
        serve(args.sessions, args.lines)
    else:
        print(json.dumps(turn_path(near=args.near, far=args.far, half=args.half, repeats=args.repeats,
                                   lines=args.lines, fresh=args.role == "path-fresh")), flush=True)


if __name__ == "__main__":
    main()
