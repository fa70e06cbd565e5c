"""The `local` runtime: one isolated OS process per agent session, speaking the ACR HTTP contract.

Each session gets a fresh temporary working directory (also its HOME and TMPDIR), a scrubbed
environment, resource limits, and its own sandbox (`isolation.py`: bubblewrap namespaces by
default, a uid per session as the fallback, `none` only when asked); that process serves the
agent's BedrockAgentCoreApp on a unix socket in its own directory (a loopback port without
isolation). Whatever happens - success, agent crash, timeout, cancellation - the whole session
is killed and the directory removed. `sandbox(session_id)` runs commands and moves files inside
a live session (`sandbox.py`).

Start methods: `spawn` runs a fresh interpreter per session (`_agent_server.py`), which imports
bedrock_agentcore, openai and the agent every time (about 0.8 CPU-seconds). `fork` imports them
once per agent spec in a zygote process (`_zygote.py`, started by the first session of that
spec) and forks it per session; the child then re-seeds `random` (and numpy's global RNG). The
difference an agent can see: its module-level code runs once, in the zygote (cwd: a private temp
dir, not the session's), and every session starts from a copy-on-write copy of that module state
- gunicorn's `--preload` semantics. Agents that start threads at import time should use `spawn`.
A forked child shares its zygote's namespaces and uid, so `fork` serves only `isolation=none`;
`auto` (the default) picks `spawn` for isolated sessions and `fork` otherwise.

Results: a JSON body is the result (a non-dict value becomes `{"output": value}`). A streaming
body (`data: <json>` lines, what BedrockAgentCoreApp sends for generator handlers) yields its
last event as the result, the other events are dropped; a final streamed error event is an
agent_error. The session timeout counts from the moment the session gets a concurrency slot
and covers process start, readiness and the invocation; time spent waiting for a slot does not
count (and is not in `elapsed_s`).

Long because one session's life (slot, directory, isolation, spawn or fork, readiness, the
task's MCP servers (`_mcp.py`), the invoke, its result, the kill and cleanup on every exit path,
the live sandbox) is one state machine over the registry of live sessions. The rest is separate:
`isolation.py`, `_launch.py` (a spawned agent process), `sandbox.py`, `_zygote*.py`,
`_agent_server.py`, `_results.py`, `_processes.py`, `_local_session.py` (the session record,
agent failures), `_final_state.py` (kept files).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import shutil
import signal
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

from ..errors import ConfigError, RuntimeStartError
from ..records import SessionOutcome, Status
from . import _final_state
from . import _invocations as invocations
from ._local_session import (
    AgentFailed,
    LocalSession,
    error_text,
    loopback_client,
    parse_result,
    session_environment,
    read_body,
    resolve_agent,
    section,
    stderr_section,
)
from ._launch import HARNESS_SRC, SETUP_ATTEMPTS, sandbox_setup_failed, spawn_agent
from ._mcp import McpStarter
from ._processes import Child, SpawnedChild, log_rmtree_error, terminate
from ._rooted import rooted_isolation
from ._session_caps import RESOURCE_EXCEEDED, Caps, SessionCaps, watch
from ._zygote_pool import ZygoteFailed, ZygotePool
from .base import AgentRef, AgentRuntime
from .isolation import Isolation, IsolationChoice, NoIsolation, SessionUid, build_isolation
from .local_config import LocalRuntimeConfig
from .network import Destination, SessionNetwork, url_destination
from .sandbox import SessionSandbox

logger = logging.getLogger(__name__)

SESSION_HEADER = "X-Amzn-Bedrock-AgentCore-Runtime-Session-Id"
_EXIT_WAIT_S = 1.0


LOAD_FAILED = "cannot load the agent: "  # how a session says its agent failed to import


class LocalRuntime(AgentRuntime):
    """Runs each agent session in its own process; implements `AgentRuntime`."""

    def __init__(
        self,
        config: LocalRuntimeConfig = LocalRuntimeConfig(),
        *,
        isolation: IsolationChoice | Isolation | None = None,
        private_dirs: tuple[Path, ...] = (),
        python: str = sys.executable,
        base_dir: str | os.PathLike[str] | None = None,
        kill_grace_s: float = 2.0,
    ) -> None:
        """`config` is the `runtime` node (`local_config.py`: start method, isolation, result
        mode, ...). `isolation` replaces the one `config` describes (an `IsolationChoice`, or a
        built `Isolation`); `private_dirs` (the run directory) are hidden from the sessions too.
        `base_dir` is where session directories are created (default: the system temp dir);
        `python` runs the agent processes; `kill_grace_s` is how long a session may take to exit
        after SIGTERM. See the module docstring for start methods and result modes."""
        config.validate()
        start_method = config.start_method
        if start_method == "fork" and not hasattr(os, "fork"):
            raise ConfigError("runtime.start_method=fork needs os.fork (POSIX); use start_method=spawn")
        self.config = config
        self.result_mode = config.result_mode
        self.s3_bucket = config.s3_bucket or "arl-local-results"
        self.exp_id = config.exp_id or f"arl-local-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._sink: Any = None
        self.base_dir = Path(base_dir) if base_dir is not None else None
        if isolation is None:
            isolation = IsolationChoice(
                kind=config.isolation, limits=config.limits, network=config.network,
                hidden=(*map(Path, config.hidden_paths), *private_dirs),
                readable=tuple(map(Path, config.readable_paths)))
        if start_method == "fork" and isinstance(isolation, IsolationChoice) and isolation.kind == "auto":
            logger.warning("start_method=fork: agent sessions are NOT isolated from each other "
                           "(forked children share their zygote's namespaces and uid); use "
                           "start_method=spawn (or auto) for isolated sessions")
            isolation = dataclasses.replace(isolation, kind="none")
        if isinstance(isolation, IsolationChoice):
            isolation = build_isolation(isolation, base_dir=self.base_dir)
        self.isolation: Isolation = isolation
        self.caps = SessionCaps(Caps.resolve(isolation.limits, concurrency=config.concurrency))
        (logger.warning if self.caps.why_no_cgroup else logger.info)("%s", self.caps.describe())
        isolated = not isinstance(isolation, NoIsolation)
        if start_method == "auto":
            start_method = "spawn" if isolated or not hasattr(os, "fork") else "fork"
        elif start_method == "fork" and isolated:
            raise ConfigError(
                f"runtime.start_method=fork cannot isolate sessions (forked children share their "
                f"zygote's namespaces and uid), but isolation is {isolation.name!r}: use "
                "start_method=spawn (or auto), or isolation=none to keep fork"
            )
        self.concurrency = config.concurrency
        self.startup_timeout_s = config.startup_timeout_s
        self.python = python
        self.env_passthrough = tuple(config.env_passthrough)
        self.kill_grace_s = kill_grace_s
        self.final_state_max_bytes = config.final_state_mb * 1024 * 1024
        self.start_method = start_method
        self._slots = asyncio.Semaphore(config.concurrency)
        self._live: set[Child] = set()
        self._sessions: dict[str, LocalSession] = {}
        # Per agent: the first session's start (later ones wait for it), and a load error, which
        # ends every later session of that agent at once instead of importing it again.
        self._first_starts: dict[str, asyncio.Future[None]] = {}
        self._load_errors: dict[str, str] = {}
        self._mcp = McpStarter(python=shutil.which(python) or python)  # the tasks' MCP servers
        self._rooted: dict[str, Isolation] = {}  # environment spec path -> its sessions' isolation
        self._kept_isolation: dict[str, Isolation] = {}  # session id -> its environment, until kept()
        self._closed = False
        self._zygotes = ZygotePool(
            python=python, startup_timeout_s=config.startup_timeout_s, kill_grace_s=kill_grace_s,
            environment=self._environment,
        ) if start_method == "fork" else None
        if config.result_mode == "s3":
            from ._result_sink import ResultSink

            self._sink = ResultSink()

    @classmethod
    def for_run(cls, config: LocalRuntimeConfig, *, private_dirs: tuple[Path, ...] = (),
                session_timeout_s: float | None = None) -> LocalRuntime:
        """The run's runtime (`registry.py`): the session timeout is the caller's to enforce."""
        return cls(config, private_dirs=private_dirs)

    async def run_session(
        self, *, agent: AgentRef, session_id: str, payload: dict[str, Any], timeout_s: float,
        keep_state: bool = False,
    ) -> SessionOutcome:
        """`keep_state`: return the session's final files (`SessionOutcome.final_state`, at most
        `final_state_max_bytes`), which `restore` opens again as a sandbox for scoring."""
        async with self._slots:
            if self._closed:
                raise RuntimeStartError("LocalRuntime is closed; create a new one to run sessions")
            started = time.monotonic()
            isolation = self._isolation_for(agent)
            session = LocalSession(Path(tempfile.mkdtemp(prefix=f"arl-{os.getpid()}-", dir=self._base())),
                                   session_id=session_id, keep_state=keep_state, isolation=isolation)
            try:
                result = await self._run(session, agent, payload, timeout_s)
            except AgentFailed as failure:
                status, result, error = failure.status, None, failure.error
            else:
                status, error = Status.COMPLETED, None
            if session.caps is not None and session.caps.breach is not None:
                then = f" (then: {error.splitlines()[0]})" if error else ""
                status, result, error = (Status.AGENT_ERROR, None,
                                         f"{RESOURCE_EXCEEDED}: {session.caps.breach}{then}")
            if session.final_state is not None and isolation is not self.isolation:
                self._kept_isolation[session_id] = isolation
            return SessionOutcome(
                status=status, result=result, error=error, elapsed_s=time.monotonic() - started,
                final_state=session.final_state, final_state_error=session.final_state_error,
            )

    def restore(self, final_state: bytes, *, session_id: str = "restored",
                workdir: str | None = None) -> contextlib.AbstractAsyncContextManager[SessionSandbox]:
        """A sandbox over a finished session's files (`final_state`), isolated like a session
        (in its task's environment, if it had one):
        `async with runtime.restore(outcome.final_state) as sandbox: await sandbox.exec(...)`.
        `workdir` (the session's old directory) is reused when free, so absolute paths hold."""
        return self._restore(final_state, self._kept_isolation.pop(session_id, self.isolation),
                             session_id=session_id, workdir=workdir)

    def _restore(self, final_state: bytes, isolation: Isolation, *, session_id: str,
                 workdir: str | None = None) -> contextlib.AbstractAsyncContextManager[SessionSandbox]:
        return _final_state.restore(
            final_state, isolation=isolation, workdir=workdir, session_id=session_id,
            base=(self._base() or Path(tempfile.gettempdir())).resolve(),
            environment=lambda home, root: isolation.session_env(self._environment(home, root)),
            startup_timeout_s=self.startup_timeout_s, kill_grace_s=self.kill_grace_s,
        )

    def _isolation_for(self, agent: AgentRef) -> Isolation:
        """The runtime's isolation, rooted in the task's environment when it has one
        (`runtime.environments.<task>` first, then the task's own `environment=`)."""
        path = self.config.environments.get(agent.task, agent.environment)
        if path is None:
            return self.isolation
        if path not in self._rooted:
            self._rooted[path] = rooted_isolation(self.isolation, str(Path(path).resolve()),
                                                  task=agent.task, harness_src=HARNESS_SRC)
        return self._rooted[path]

    def kept(self, outcome: SessionOutcome, *, session_id: str) -> _final_state.KeptFiles:
        """What `run_session(keep_state=True)` kept of a session, for its task to inspect; it
        takes the session's isolation along, so nothing of it stays here."""
        isolation = self._kept_isolation.pop(session_id, self.isolation)
        return _final_state.KeptFiles(
            lambda state: self._restore(state, isolation, session_id=session_id), outcome.final_state,
            outcome.final_state_error, session_id=session_id)

    def _base(self) -> Path | None:
        if self.base_dir is not None:
            self.base_dir.mkdir(parents=True, exist_ok=True)
        return self.base_dir

    async def aclose(self) -> None:
        """Kill every live session process and zygote; later `run_session` calls raise."""
        self._closed = True
        self._kept_isolation.clear()  # files never restored: their sessions' isolation goes too
        await asyncio.gather(*(self._terminate(child) for child in list(self._live)))
        for session in list(self._sessions.values()):  # their cleanup may never run (a dead loop)
            if session.caps is not None:
                session.caps.close()
        if self._zygotes is not None:
            await self._zygotes.aclose()
        if self._sink is not None:
            self._sink.close()

    @property
    def live_sessions(self) -> int:
        return len(self._live)

    def sandbox(self, session_id: str) -> SessionSandbox:
        """Shell and files inside the live session `session_id` (SandboxError once it ended)."""
        from ..errors import SandboxError

        session = self._sessions.get(session_id)
        child = session.child if session is not None else None
        if session is None or child is None or child.exited:
            raise SandboxError(f"no live local session {session_id!r}: a sandbox exists only "
                               "while its session runs")
        if session.sandbox is None:
            host_pid = child.sandbox_pid() if isinstance(child, SpawnedChild) else child.pid
            if host_pid is None:
                raise SandboxError(f"session {session_id!r} has not started its process yet")
            session.sandbox = SessionSandbox(
                session_id=session_id, isolation=session.isolation, host_pid=host_pid,
                workdir=str(session.workdir), env=session.env or {},
                join=session.caps.argv_prefix() if session.caps is not None else (),
            )
        return session.sandbox

    # -- one session ------------------------------------------------------------------------

    async def _run(
        self, session: LocalSession, agent: AgentRef, payload: dict[str, Any], timeout_s: float
    ) -> dict[str, Any]:
        deadline = asyncio.get_running_loop().time() + timeout_s
        session_id = session.session_id
        self._sessions[session_id] = session
        watchdog = asyncio.create_task(self._watch(session))
        try:
            spec, import_root = resolve_agent(agent)
            if self.isolation.isolates_network:
                session.network = SessionNetwork(
                    self._destinations(payload),
                    hosts_path=session.workdir.with_name(session.workdir.name + ".hosts"))
            try:
                async with asyncio.timeout_at(deadline):
                    port = await self._start_once_loadable(session, spec, import_root)
                    payload = await self._mcp.start(agent.mcp_servers, payload, lambda: self.sandbox(session_id))
                    payload, key = invocations.prepare_payload(
                        payload, result_mode=self.result_mode, exp_id=self.exp_id,
                        bucket=self.s3_bucket, input_id=str(agent.input_id or agent.task),
                        session_id=session_id,
                    )
                    return await self._invoke(session, port, session_id, payload, key)
            except TimeoutError:
                raise AgentFailed(
                    Status.TIMEOUT,
                    f"agent {spec} did not answer within {timeout_s:g}s (session {session_id})",
                ) from None
        finally:
            watchdog.cancel()
            await self._cleanup(session)

    async def _watch(self, session: LocalSession) -> None:
        """Kill the session once it breaks a cap (`_session_caps.py`); the breach is its error."""
        while session.caps is None:
            await asyncio.sleep(0.05)

        def sandbox_pid() -> int | None:
            return session.child.sandbox_pid() if isinstance(session.child, SpawnedChild) else None

        try:
            await watch(session.caps, sandbox_pid=sandbox_pid,
                        tmpfs_dirs=session.isolation.session_tmpfs(session.workdir))
        except Exception:  # a bug here must not pass silently: the session runs unwatched
            logger.exception("the caps watchdog of session %s failed; it runs without its "
                             "session-wide caps being checked", session.session_id)

    def _destinations(self, payload: dict[str, Any]) -> list[Destination]:
        """What an isolated session may reach: its gateway, the S3 stand-in, `network.allow`."""
        urls = [str((payload.get("_rollout") or {}).get("base_url") or "")]
        if self._sink is not None:
            urls.append(self._sink.url)
        found = [url_destination(url) for url in urls]
        return [*(d for d in found if d is not None), *self.isolation.network.destinations()]

    def _environment(self, home: Path, import_root: str) -> dict[str, str]:
        """The scrubbed environment of a process living in `home` (its HOME; TMPDIR inside)."""
        return session_environment(home, [import_root, str(HARNESS_SRC)], passthrough=self.env_passthrough,
                                   extra=self._sink.environment() if self._sink is not None else {})

    async def _start_once_loadable(self, session: LocalSession, spec: str, import_root: str) -> int | str:
        """`_start`, but an agent that failed to load is not started again: its first session
        loads it while the others wait, and if it cannot be imported they all end at once."""
        first = self._first_starts.get(spec)
        if first is None:
            first = self._first_starts[spec] = asyncio.get_running_loop().create_future()
            try:
                return await self._start(session, spec, import_root)
            except AgentFailed as failure:
                if failure.error.startswith(LOAD_FAILED):
                    self._load_errors[spec] = failure.error
                raise
            finally:
                if not first.done():
                    first.set_result(None)
        await asyncio.shield(first)
        if spec in self._load_errors:
            raise AgentFailed(Status.AGENT_ERROR, (
                f"agent {spec} failed to load in an earlier session of this run, so it is not "
                f"started again; fix it and rerun: " + self._load_errors[spec].splitlines()[0]))
        return await self._start(session, spec, import_root)

    async def _start(self, session: LocalSession, spec: str, import_root: str) -> int | str:
        session.caps = self.caps.open(session.workdir)  # its tmpfs first: the env makes tmp/
        env = session.isolation.session_env(self._environment(session.workdir, import_root))
        session.env = env
        self.isolation.prepare(session.workdir)
        if isinstance(self.isolation, SessionUid):
            session.caps.give_to(self.isolation.uid_of(session.workdir))
        try:
            async with asyncio.timeout(self.startup_timeout_s):
                for attempt in range(1, SETUP_ATTEMPTS + 1):  # bubblewrap's own set-up can race
                    session.child = await self._launch(session, spec, import_root, env)
                    self._live.add(session.child)
                    try:
                        port = await self._read_address(session, spec)
                        break
                    except AgentFailed:
                        if attempt == SETUP_ATTEMPTS or not sandbox_setup_failed(session, self.isolation):
                            raise
                        logger.warning("session %s: bubblewrap failed to set up the sandbox (launch %d "
                                       "of %d), starting it again:%s", session.session_id, attempt,
                                       SETUP_ATTEMPTS, stderr_section(session))
                        await self._terminate(session.child)
                if not isinstance(session.child, SpawnedChild):  # forked: its pid is known now
                    session.caps.adopt(session.child.pid)
                if session.network is not None and isinstance(session.child, SpawnedChild):
                    await session.network.start(await session.child.wait_sandbox_pid(
                        self.startup_timeout_s))
                await self._wait_healthy(session, port, spec)
        except TimeoutError:
            raise AgentFailed(Status.TIMEOUT, f"agent {spec} did not become ready within startup_timeout_s="
                              f"{self.startup_timeout_s:g}s" + stderr_section(session)) from None
        return port

    async def _launch(
        self, session: LocalSession, spec: str, import_root: str, env: dict[str, str]
    ) -> Child:
        if self._zygotes is not None:
            try:
                return await self._zygotes.fork(
                    spec=spec, import_root=import_root, workdir=session.workdir, env=env
                )
            except ZygoteFailed as failure:
                raise AgentFailed(
                    failure.status, failure.error + section(failure.stderr_tail)
                ) from None
        return await spawn_agent(session, python=self.python, isolation=self.isolation, spec=spec,
                                 import_root=import_root, env=env)

    async def _read_address(self, session: LocalSession, spec: str) -> int | str:
        assert session.child is not None
        line = await session.child.read_ready()
        if not line:
            raise await self._exited(session, f"agent {spec} exited before it was ready")
        try:
            ready = json.loads(line)
        except json.JSONDecodeError:
            raise await self._exited(
                session, f"agent {spec} wrote an unexpected ready line {line[:200]!r}"
            ) from None
        if "error" in ready:
            raise AgentFailed(Status.AGENT_ERROR, f"{LOAD_FAILED}{ready['error']}")
        return str(ready["unix"]) if "unix" in ready else int(ready["port"])

    async def _wait_healthy(self, session: LocalSession, port: int | str, spec: str) -> None:
        assert session.child is not None
        async with loopback_client(port) as client:
            while True:
                if session.child.exited:
                    raise await self._exited(session, f"agent {spec} exited before it was ready")
                try:
                    response = await client.get("/ping")
                    if response.status_code == 200:
                        return
                except httpx.TransportError:
                    pass  # not accepting yet; the loop checks whether the process died
                await asyncio.sleep(0.02)

    async def _invoke(
        self, session: LocalSession, port: int | str, session_id: str, payload: dict[str, Any],
        key: str | None = None,
    ) -> dict[str, Any]:
        # No per-request timeout: the session deadline (asyncio.timeout_at) governs.
        async with loopback_client(port, timeout=None) as c:
            try:
                async with c.stream("POST", "/invocations", json=payload,
                                    headers={SESSION_HEADER: session_id}) as streamed:
                    body = await read_body(streamed, self.caps.result_bytes)
                response = httpx.Response(streamed.status_code, headers=streamed.headers, content=body)
            except httpx.TransportError as exc:
                raise await self._exited(
                    session, f"agent dropped the connection while answering ({exc!r})"
                ) from None
            if not 200 <= response.status_code < 300:
                raise AgentFailed(
                    Status.AGENT_ERROR,
                    f"agent returned HTTP {response.status_code}: {error_text(response)}"
                    + stderr_section(session),
                )
            answer = parse_result(response, session)
            if key is not None and invocations.is_background_accept(answer):
                return await self._s3_result(session, str(answer.get("result_key") or key))
            return await self._settle(c, session, session_id, answer)

    async def _s3_result(self, session: LocalSession, key: str) -> dict[str, Any]:
        from ._acr_calls import SessionFailed

        try:
            return await self._sink.result(self.s3_bucket, key)
        except SessionFailed as failure:
            raise AgentFailed(failure.status, failure.error + stderr_section(session)) from None

    async def _settle(
        self, c: httpx.AsyncClient, session: LocalSession, session_id: str, answer: dict[str, Any]
    ) -> dict[str, Any]:
        """Follow an answer that is not the result yet (agentcore-rl-toolkit's app classes)."""

        async def get(invocation_id: str) -> Any:
            async with c.stream("POST", "/invocations", json=invocations.get_payload(invocation_id),
                                headers={SESSION_HEADER: session_id}) as response:
                body = await read_body(response, self.caps.result_bytes)
            return parse_result(response, session, body)

        try:
            return await invocations.settle(answer, get=get, poll_initial_s=0.05, poll_max_s=1.0)
        except invocations.InvocationFailed as failure:
            raise AgentFailed(Status.AGENT_ERROR, f"{failure}{stderr_section(session)}") from None
        except httpx.TransportError as exc:
            raise await self._exited(session, f"agent dropped the connection ({exc!r})") from None

    async def _exited(self, session: LocalSession, what: str) -> AgentFailed:
        """The failure for a child that is gone (or going): exit code plus the stderr tail."""
        child = session.child
        assert child is not None
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(_EXIT_WAIT_S):
                await child.wait()
        return AgentFailed(
            Status.AGENT_ERROR, f"{what}; {child.exit_state()}" + stderr_section(session)
        )

    # -- cleanup ------------------------------------------------------------------------------

    async def _cleanup(self, session: LocalSession) -> None:
        self._sessions.pop(session.session_id, None)
        try:
            if session.network is not None:
                await session.network.aclose()
            if session.sandbox is not None:
                await session.sandbox.aclose()
            if session.caps is not None:
                session.caps.check()  # a cap broken since the watchdog's last look
            if session.child is not None:
                try:
                    await self._terminate(session.child)
                except asyncio.CancelledError:
                    session.child.send_signal(signal.SIGKILL)
                    raise
            if session.keep_state:
                session.final_state, session.final_state_error = await asyncio.to_thread(
                    _final_state.keep, session.workdir, max_bytes=self.final_state_max_bytes)
        finally:
            if session.caps is not None:
                session.caps.close()
            shutil.rmtree(session.workdir, onerror=log_rmtree_error)
            if isinstance(self.isolation, SessionUid):
                self.isolation.release(session.workdir)

    async def _terminate(self, child: Child) -> None:
        try:
            await terminate(child, kill_grace_s=self.kill_grace_s)
        finally:
            self._live.discard(child)

