"""Real substitutes for AWS in the `agentcore` runtime tests, all on loopback.

- `serve(app)`: an ASGI app (a BedrockAgentCoreApp agent, a fake model endpoint) on uvicorn in a
  background thread.
- `DataPlaneStub`: the two bedrock-agentcore data-plane routes the runtime calls, with the wire
  shapes botocore's `bedrock-agentcore` model expects (rest-json: ARN in the path, session id in
  the `X-Amzn-Bedrock-AgentCore-Runtime-Session-Id` header, `qualifier` in the query, errors as
  status + `x-amzn-ErrorType`). Invocations are forwarded to the agent over HTTP, like ACR does
  to its container; an agent's HTTP error comes back as ACR's `RuntimeClientError` (424).
  Faults are scripted per call. StopRuntimeSession cancels the session's in-flight invocation.
  InvokeAgentRuntimeCommand runs the command with `/bin/sh -c` in a per-session directory (its
  HOME, TMPDIR and cwd, as the session's microVM would have) and streams the output back as a
  binary AWS event stream (`encode_event`), with the body's timeout enforced.
- `moto_s3()`: moto's ThreadedMotoServer, a real S3 endpoint.
- `quick_runtime()`, `new_session_id()`: an `AgentCoreRuntime` with test-speed delays, and a
  session id for it (the `aws`, `aws_credentials` and `acr_plane` fixtures are in conftest.py).
"""

from __future__ import annotations

import asyncio
import binascii
import codecs
import contextlib
import importlib.util
import itertools
import json
import os
import secrets
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

SESSION_HEADER = "X-Amzn-Bedrock-AgentCore-Runtime-Session-Id"
AGENTS = Path(__file__).parent / "agents"
_module_ids = itertools.count()


@dataclass
class Server:
    url: str
    server: uvicorn.Server
    thread: threading.Thread

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=5)


def serve(app: Any) -> Server:
    """Run `app` on a fresh loopback port in a daemon thread; returns once it accepts."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        app, log_level="warning", lifespan="off", timeout_graceful_shutdown=1, access_log=False
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline:
            raise RuntimeError("test server did not start")
        time.sleep(0.005)
    return Server(url=f"http://127.0.0.1:{port}", server=server, thread=thread)


def load_agent_app(name: str) -> tuple[Any, Any]:
    """Import tests/runtimes/agents/<name> afresh; returns (module, its BedrockAgentCoreApp)."""
    from bedrock_agentcore import BedrockAgentCoreApp

    path = AGENTS / name
    spec = importlib.util.spec_from_file_location(f"_acr_agent_{next(_module_ids)}", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    apps = [v for v in vars(module).values() if isinstance(v, BedrockAgentCoreApp)]
    assert len(apps) == 1, f"{path} must define exactly one BedrockAgentCoreApp"
    return module, apps[0]


@dataclass
class Fault:
    """One scripted error answer. `after_agent`: forward to the agent first, then fail."""

    status: int
    code: str
    message: str = "injected by the test"
    after_agent: bool = False


THROTTLED = Fault(429, "ThrottlingException", "Rate exceeded")
UNAVAILABLE = Fault(503, "ServiceUnavailableException", "try again")
INTERNAL = Fault(500, "InternalServerException", "internal error")


@dataclass
class DataPlaneStub:
    """Local InvokeAgentRuntime / StopRuntimeSession endpoint; `agents` maps ARN -> agent URL."""

    agents: dict[str, str] = field(default_factory=dict)
    invocations: list[dict[str, Any]] = field(default_factory=list)
    stops: list[dict[str, Any]] = field(default_factory=list)
    invoke_faults: list[Fault] = field(default_factory=list)
    stop_faults: list[Fault] = field(default_factory=list)
    commands: list[dict[str, Any]] = field(default_factory=list)
    command_faults: list[Fault] = field(default_factory=list)
    """`after_agent=True`: the fault comes as an exception event inside the stream."""
    enforce_command_timeouts: bool = True

    def __post_init__(self) -> None:
        self.session_dirs: dict[str, Path] = {}
        self._inflight: dict[str, asyncio.Task[httpx.Response]] = {}
        self.peak_inflight = 0
        self.live: set[str] = set()  # invoked, not yet stopped: what ACR counts as live sessions
        self.peak_live = 0
        self._client: httpx.AsyncClient | None = None
        self.app = Starlette(
            routes=[
                Route("/runtimes/{arn:path}/invocations", self._invoke, methods=["POST"]),
                Route("/runtimes/{arn:path}/stopruntimesession", self._stop, methods=["POST"]),
                Route("/runtimes/{arn:path}/commands", self._command, methods=["POST"]),
            ]
        )

    @property
    def stopped_sessions(self) -> set[str]:
        return {stop["session_id"] for stop in self.stops}

    async def _invoke(self, request: Request) -> Response:
        arn = request.path_params["arn"]
        session_id = request.headers.get(SESSION_HEADER, "")
        body = await request.body()
        self.invocations.append(
            {
                "arn": arn,
                "session_id": session_id,
                "qualifier": request.query_params.get("qualifier"),
                "content_type": request.headers.get("content-type"),
                "body": body,
                "at": time.monotonic(),
            }
        )
        self.live.add(session_id)
        self.peak_live = max(self.peak_live, len(self.live))
        fault = self.invoke_faults.pop(0) if self.invoke_faults else None
        if fault is not None and not fault.after_agent:
            return _error(fault)
        if arn not in self.agents:
            return _error(Fault(404, "ResourceNotFoundException", f"no runtime {arn}"))
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=None, trust_env=False)
        forward = asyncio.ensure_future(
            self._client.post(
                self.agents[arn] + "/invocations",
                content=body,
                headers={"content-type": "application/json", SESSION_HEADER: session_id},
            )
        )
        self._inflight[session_id] = forward
        self.peak_inflight = max(self.peak_inflight, len(self._inflight))
        try:
            answer = await forward
        except asyncio.CancelledError:
            return _error(Fault(424, "RuntimeClientError", "the runtime session was stopped"))
        except httpx.TransportError as exc:
            return _error(Fault(424, "RuntimeClientError", f"runtime connection failed: {exc}"))
        finally:
            self._inflight.pop(session_id, None)
        if fault is not None:
            return _error(fault)
        if answer.status_code >= 400:
            return _error(
                Fault(
                    424,
                    "RuntimeClientError",
                    f"Received error ({answer.status_code}) from runtime: {answer.text[:500]}",
                )
            )
        return Response(
            answer.content,
            status_code=200,
            media_type=answer.headers.get("content-type"),
            headers={SESSION_HEADER: session_id, "x-amzn-RequestId": str(uuid.uuid4())},
        )

    async def _stop(self, request: Request) -> Response:
        session_id = request.headers.get(SESSION_HEADER, "")
        self.stops.append(
            {
                "arn": request.path_params["arn"],
                "session_id": session_id,
                "qualifier": request.query_params.get("qualifier"),
                "body": await request.body(),
                "at": time.monotonic(),
            }
        )
        self.live.discard(session_id)
        if self.stop_faults:
            return _error(self.stop_faults.pop(0))
        forward = self._inflight.get(session_id)
        if forward is not None:
            forward.cancel()
        return JSONResponse(
            {}, headers={SESSION_HEADER: session_id, "x-amzn-RequestId": str(uuid.uuid4())}
        )


    async def _command(self, request: Request) -> Response:
        arn = request.path_params["arn"]
        session_id = request.headers.get(SESSION_HEADER, "")
        body = json.loads(await request.body())
        self.commands.append(
            {
                "arn": arn,
                "session_id": session_id,
                "qualifier": request.query_params.get("qualifier"),
                "command": body["command"],
                "timeout": body.get("timeout"),
            }
        )
        fault = self.command_faults.pop(0) if self.command_faults else None
        if fault is not None and not fault.after_agent:
            return _error(fault)
        if arn not in self.agents:
            return _error(Fault(404, "ResourceNotFoundException", f"no runtime {arn}"))
        if session_id in self.stopped_sessions:
            return _error(Fault(404, "ResourceNotFoundException", f"session {session_id} ended"))
        if len(body["command"]) > 65536:
            return _error(Fault(400, "ValidationException", "command is over 65536 characters"))
        if session_id not in self.session_dirs:
            self.session_dirs[session_id] = Path(tempfile.mkdtemp(prefix="acr-session-"))
        return StreamingResponse(
            self._command_events(
                body["command"], self.session_dirs[session_id], body.get("timeout") or 300, fault
            ),
            media_type="application/vnd.amazon.eventstream",
            headers={SESSION_HEADER: session_id, "x-amzn-RequestId": str(uuid.uuid4())},
        )

    async def _command_events(
        self, command: str, home: Path, timeout_s: int, fault: Fault | None
    ) -> Any:
        yield encode_event({"contentStart": {}})
        if fault is not None:
            yield encode_exception(fault.code, fault.message)
            return
        # subprocess.Popen, not the loop's spawn: uvloop leaves the stub's own descriptors open
        # in children, so a detached background command would hold this stream open.
        process = subprocess.Popen(
            ["/bin/sh", "-c", command], cwd=home, start_new_session=True, close_fds=True,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home),
                 "TMPDIR": str(home), "LANG": "C.UTF-8"},
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[str, str]] = asyncio.Queue()

        def pump(stream: Any, name: str, ended: asyncio.Future[None]) -> None:
            decoder = codecs.getincrementaldecoder("utf-8")("replace")
            while chunk := stream.read1(65536):
                loop.call_soon_threadsafe(queue.put_nowait, (name, decoder.decode(chunk)))
            if tail := decoder.decode(b"", final=True):
                loop.call_soon_threadsafe(queue.put_nowait, (name, tail))
            loop.call_soon_threadsafe(ended.set_result, None)

        ends = []
        for stream, name in ((process.stdout, "stdout"), (process.stderr, "stderr")):
            ends.append(loop.create_future())
            threading.Thread(target=pump, args=(stream, name, ends[-1]), daemon=True).start()
        pumps = asyncio.gather(*ends)
        deadline = loop.time() + timeout_s if self.enforce_command_timeouts else None
        timed_out = False
        try:
            while not (pumps.done() and queue.empty()):
                getter = asyncio.ensure_future(queue.get())
                remaining = None if deadline is None else max(0.0, deadline - loop.time())
                done, _ = await asyncio.wait(
                    {getter, pumps}, timeout=remaining, return_when=asyncio.FIRST_COMPLETED
                )
                if getter in done:
                    name, text = getter.result()
                    if text:
                        yield encode_event({"contentDelta": {name: text}})
                else:
                    getter.cancel()
                if not done:
                    timed_out, deadline = True, None
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(process.pid, signal.SIGKILL)
            code = await asyncio.to_thread(process.wait)
            yield encode_event(
                {
                    "contentStop": {
                        "exitCode": -1 if timed_out else (code if code >= 0 else 128 - code),
                        "status": "TIMED_OUT" if timed_out else "COMPLETED",
                    }
                }
            )
        finally:
            if process.poll() is None:  # the client went away mid-stream
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=5)

    def close(self) -> None:
        """Remove every session's directory (the microVMs are gone)."""
        for home in self.session_dirs.values():
            shutil.rmtree(home, ignore_errors=True)


def _event_header(name: str, value: str) -> bytes:
    name_bytes, value_bytes = name.encode(), value.encode()
    return (
        struct.pack(">B", len(name_bytes)) + name_bytes
        + struct.pack(">BH", 7, len(value_bytes)) + value_bytes  # type 7: string
    )


def _event_message(headers: dict[str, str], payload: bytes) -> bytes:
    """One message of the AWS event stream encoding (what botocore.eventstream decodes)."""
    header_bytes = b"".join(_event_header(name, value) for name, value in headers.items())
    total = 12 + len(header_bytes) + len(payload) + 4
    prelude = struct.pack(">II", total, len(header_bytes))
    prelude += struct.pack(">I", binascii.crc32(prelude))
    message = prelude + header_bytes + payload
    return message + struct.pack(">I", binascii.crc32(message))


def encode_event(chunk: dict[str, Any]) -> bytes:
    """A `chunk` event of InvokeAgentRuntimeCommand's stream (a ResponseChunk as JSON)."""
    return _event_message(
        {":event-type": "chunk", ":message-type": "event", ":content-type": "application/json"},
        json.dumps(chunk).encode(),
    )


def encode_exception(code: str, message: str) -> bytes:
    """An exception event inside the stream; its type is the union member (`runtimeClientError`)."""
    return _event_message(
        {":exception-type": code[:1].lower() + code[1:], ":message-type": "exception",
         ":content-type": "application/json"},
        json.dumps({"message": message}).encode(),
    )


def _error(fault: Fault) -> Response:
    return JSONResponse(
        {"message": fault.message},
        status_code=fault.status,
        headers={"x-amzn-ErrorType": fault.code, "x-amzn-RequestId": f"req-{uuid.uuid4()}"},
    )


def fake_model_app(seen: list[dict[str, Any]]) -> Starlette:
    """A minimal OpenAI Chat Completions endpoint that records who called it."""

    async def completions(request: Request) -> Response:
        body = await request.json()
        seen.append({"authorization": request.headers.get("authorization"), "body": body})
        return JSONResponse(
            {
                "id": "chatcmpl-test",
                "object": "chat.completion",
                "created": 0,
                "model": body["model"],
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": "stop",
                        "message": {"role": "assistant", "content": "#### 42"},
                    }
                ],
                "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
            }
        )

    return Starlette(routes=[Route("/v1/chat/completions", completions, methods=["POST"])])


def new_session_id() -> str:
    """A fresh runtime session id, long enough for ACR (33 characters at least)."""
    return "arl-" + secrets.token_hex(20)


def quick_runtime(endpoint_url: str, **options: Any) -> Any:
    """An `AgentCoreRuntime` against `endpoint_url` that backs off and polls in milliseconds;
    `options` are `AgentCoreRuntimeConfig` fields (`arns` among them) or its collaborators
    (`client_factory`, `limiter`, `priorities`)."""
    from agentcore_rl_harness.runtimes.agentcore import AgentCoreRuntime
    from agentcore_rl_harness.runtimes.agentcore_config import AgentCoreRuntimeConfig

    collaborators = {k: options.pop(k) for k in ("client_factory", "limiter", "priorities") if k in options}
    config = AgentCoreRuntimeConfig(**{"retry_backoff_s": 0.01, "poll_initial_s": 0.02, "poll_max_s": 0.1, **options},
                                    endpoint_url=endpoint_url)
    return AgentCoreRuntime(config, **collaborators)


AWS_TEST_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-west-2",
    "AWS_CONFIG_FILE": "/dev/null",
    "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
    "AWS_EC2_METADATA_DISABLED": "true",
}


@contextlib.contextmanager
def moto_s3(bucket: str) -> Iterator[str]:
    """A real S3 endpoint (moto) on loopback with `bucket` created; yields its URL."""
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    url = f"http://{host}:{port}"
    try:
        boto3.client("s3", region_name="us-west-2", endpoint_url=url).create_bucket(
            Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": "us-west-2"}
        )
        yield url
    finally:
        server.stop()


@contextlib.contextmanager
def aws_environment(bucket: str) -> Iterator[str]:
    """Fake AWS credentials plus a moto S3 (with `bucket`) that boto3 and in-process agents use."""
    import pytest

    with pytest.MonkeyPatch.context() as patch:
        for name, value in AWS_TEST_ENV.items():
            patch.setenv(name, value)
        with moto_s3(bucket) as s3_url:
            patch.setenv("AWS_ENDPOINT_URL_S3", s3_url)
            yield s3_url


@contextlib.contextmanager
def serve_data_plane(agents: dict[str, str]) -> Iterator[DataPlaneStub]:
    """A `DataPlaneStub` routing ARNs to agent URLs, served on loopback; `.url` is its endpoint."""
    plane = DataPlaneStub(agents=dict(agents))
    server = serve(plane.app)
    plane.url = server.url
    try:
        yield plane
    finally:
        server.stop()
        plane.close()


def agent_ref(name: str) -> Any:
    """An `AgentRef` for one of the test agents in tests/runtimes/agents/."""
    from agentcore_rl_harness.runtimes.base import AgentRef

    return AgentRef(task="t", agent=str(AGENTS / name))


def alive(pid: int) -> bool:
    """True if `pid` runs (a zombie left for a non-reaping init counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"
