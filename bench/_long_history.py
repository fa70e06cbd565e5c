"""Long sessions: the gateway's CPU per turn as the history grows (`bench/gateway.py --scenario long`).

An agent loop of `--turns` turns: every reply is a tool call (a fixed sampler, no model), every
tool output is about `--tool-tokens` tokens of build log, so a 200-turn session with 300-token
outputs carries ~60k tokens of history. The SmolLM2 tokenizer with the packaged tool template
(`chatml_tools`) renders it. Sessions run one at a time, so the server does one turn at a time.

CPU per turn is the server process's CPU (all its threads, Linux schedstat, ns) between the
moments the driver starts two consecutive turns, read by the driver from /proc: the driver's own
work (building the next body, parsing the answer) is in another process and does not count.

Wires (`--wire`): `chat` (Chat Completions `messages`), `anthropic` (Messages: `system` and
`messages`, tool results as `tool_result` blocks) and `responses` (Responses `instructions` and
`input` items, the reply's output items re-sent as they came, `function_call_output` items). Each
agent re-sends its whole history every turn, serialised with `json.dumps` as the SDKs do.

Roles:
  serve   python bench/_long_history.py serve --wire W --turns T --lines N --sessions S
          start the gateway, spawn the driver, print one JSON line of per-turn CPU (ms)
  drive   (spawned by serve) run the sessions over raw HTTP/1.1 and print per-turn CPU
  path    the same conversation through the turn path alone (`prepare_turn` + `sample_turn`:
          render, tokenise, turn tree; no HTTP, no wire parsing), thread CPU per turn, given the
          messages as the chat route hands them over (untimed: its known messages are the objects
          it already holds, `gateway/known_history.py`)
  path-fresh  the same with every message translated anew each turn (as every wire did before
          its known history): the turn tree compares each one with what it holds
`serve` uses whichever `agentcore_rl_harness` is on the path, so `bench/gateway.py` can run it
against another checkout's `src` (`--baseline-src`) in the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from urllib.parse import urlsplit

SYSTEM = "You are a build agent. Use the shell tool until the build is green."
TASK = "The build of project atlas fails. Find out why and fix it."
TOOLS = [{"type": "function", "function": {
    "name": "shell", "description": "Run a shell command and return its output.",
    "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}}}]
CALL = '<tool_call>\n{"name": "shell", "arguments": {"cmd": "make -k step"}}\n</tool_call>'


def tool_output(turn: int, lines: int) -> str:
    """About 37 tokens a line of plausible, turn-dependent build log."""
    return "\n".join(f"[{turn:04d}.{i:02d}] cc -O2 -c src/module_{(turn * 7 + i) % 113}.c -o "
                     f"build/m{i}.o ({(turn * 31 + i * 17) % 997} ms) ok" for i in range(lines))


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

    def __init__(self, wire: str, lines: int) -> None:
        self.wire, self.lines = wire, lines
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
        reply, output = json.loads(answer), tool_output(turn, self.lines)
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


def drive(base_url: str, server_pid: int, session_ids: list[str], turns: int, lines: int,
          wire: str = "chat") -> list[list[float]]:
    """Per session, the server CPU ms of each turn."""
    parts = urlsplit(base_url)
    sock = socket.create_connection((parts.hostname, parts.port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock_file = sock.makefile("rb")
    per_session = []
    for session_id in session_ids:
        conversation = Conversation(wire, lines)
        path = parts.path.rstrip("/") + conversation.path
        marks = []
        for turn in range(turns):
            body = conversation.body()
            head = (f"POST {path} HTTP/1.1\r\nHost: {parts.hostname}\r\nContent-Type: application/json\r\n"
                    f"Authorization: Bearer {session_id}\r\nContent-Length: {len(body)}\r\n\r\n").encode()
            marks.append(process_cpu_ns(server_pid))
            sock.sendall(head + body)
            status, answer = _read_response(sock_file)
            if status != 200:
                raise SystemExit(f"turn {turn + 1}: HTTP {status}: {answer[:500]!r}")
            conversation.answered(answer, turn)
        time.sleep(0.05)  # let the last turn's trailing work finish
        marks.append(process_cpu_ns(server_pid))
        per_session.append([(b - a) / 1e6 for a, b in zip(marks, marks[1:])])
    sock.close()
    return per_session


def serve(turns: int, lines: int, sessions: int, wire: str = "chat") -> dict:
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
        done = subprocess.run(
            [sys.executable, os.path.abspath(__file__), "drive", "--base-url", server.base_url,
             "--server-pid", str(os.getpid()), "--turns", str(turns), "--lines", str(lines), "--wire", wire,
             f"--session-ids={','.join(opened)}"],  # `=`: an id may start with "-"
            capture_output=True, text=True, timeout=3600)
        if done.returncode != 0:
            raise SystemExit(f"driver failed: {done.stderr[-3000:]}")
        per_session = json.loads(done.stdout.strip().splitlines()[-1])
        finished = [server.sessions.finish(session_id) for session_id in opened]
    (trace,) = finished[-1].traces  # one row: every turn extended the one before
    return {"wire": wire, "cpu_ms": per_session, "traces": len(finished[-1].traces), "history_tokens": len(trace.token_ids),
            "tool_output_tokens": len(renderer.encode(tool_output(turns // 2, lines))),
            "drift_events": finished[-1].metadata["drift_events"], "forks": finished[-1].metadata["forks"]}


def turn_path(turns: int, lines: int, sessions: int, *, fresh: bool = False) -> dict:
    """Thread CPU ms of `prepare_turn` + `sample_turn` per turn, given the internal messages the
    chat route hands over (its known messages as the objects it already holds), or with `fresh`
    every message translated anew (as a wire without its known history would)."""
    import asyncio

    from agentcore_rl_harness.gateway import openai_wire
    from agentcore_rl_harness.gateway.messages import chat_tools
    from agentcore_rl_harness.gateway.rendering import ChatTemplateRenderer, load_template
    from agentcore_rl_harness.gateway.sessions import SessionStore
    from agentcore_rl_harness.gateway.turn import RequestedSampling, prepare_turn, sample_turn
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

    def translate(session, messages):
        if fresh or chat_request is None:
            return openai_wire.to_internal(messages), chat_tools(TOOLS)
        body, internal = chat_request(Context(), session, {"messages": list(messages), "tools": TOOLS})
        return internal, chat_tools(body.tools)

    import gc

    gc.collect()
    gc.freeze()  # as the served gateway does (GatewayConfig.gc_freeze)
    loop = asyncio.new_event_loop()
    per_session = []
    for _ in range(sessions):
        store = SessionStore(renderer=renderer)
        session = store.get(store.open())
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": TASK}]
        cpu = []
        for turn in range(turns):
            internal, tools = translate(session, messages)
            start = time.thread_time_ns()
            prepared = prepare_turn(session=session, renderer=renderer, messages=internal, tools=tools,
                                    requested=RequestedSampling())
            loop.run_until_complete(sample_turn(prepared, sampler=FixedSampler(), renderer=renderer))
            cpu.append((time.thread_time_ns() - start) / 1e6)
            call_id = f"call_{turn}"
            messages.append({"role": "assistant", "content": "", "tool_calls": [{"id": call_id, "type": "function",
                             "function": {"name": "shell", "arguments": '{"cmd": "make -k step"}'}}]})
            messages.append({"role": "tool", "tool_call_id": call_id, "content": tool_output(turn, lines)})
        per_session.append(cpu)
    loop.close()
    return {"cpu_ms": per_session}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("role", choices=["serve", "drive", "path", "path-fresh"])
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--lines", type=int, default=8, help="tool output lines (~37 tokens each)")
    parser.add_argument("--sessions", nargs="+", default=["3"])
    parser.add_argument("--wire", choices=WIRES, default="chat", help="serve, drive: the wire the agent speaks")
    parser.add_argument("--session-ids", default="", help="drive: comma-separated session keys")
    parser.add_argument("--base-url")
    parser.add_argument("--server-pid", type=int)
    args = parser.parse_args()
    if args.role == "drive":
        session_ids = args.session_ids.split(",") if args.session_ids else args.sessions
        print(json.dumps(drive(args.base_url, args.server_pid, session_ids, args.turns, args.lines, args.wire)))
    elif args.role in ("path", "path-fresh"):
        print(json.dumps(turn_path(args.turns, args.lines, int(args.sessions[0]), fresh=args.role == "path-fresh")),
              flush=True)
    else:
        print(json.dumps(serve(args.turns, args.lines, int(args.sessions[0]), args.wire)), flush=True)


if __name__ == "__main__":
    main()
