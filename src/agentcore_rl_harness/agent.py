"""Helpers for agent code: read the harness's `_rollout` block and get a client for the gateway.

Agents import this module inside their own process, so it imports nothing heavy: `openai` is
loaded only when a client is asked for, `boto3` only when a result is written to S3. Using it is
optional; an agent may read `payload["_rollout"]["base_url"]` and `["api_key"]` itself (the
ART convention). `rollout_entrypoint` registers a handler on a BedrockAgentCoreApp that serves
both result modes of the `agentcore` runtime (inline, or the S3 contract of agentcore-rl-toolkit).
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import json
import logging
import threading
import traceback
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping

from .errors import MissingDependencyError

if TYPE_CHECKING:
    import openai

ROLLOUT_KEY = "_rollout"
_logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class RolloutConfig:
    """Where and as whom an agent session talks to its model."""

    base_url: str
    """The rollout gateway's OpenAI-compatible base URL, ending in `/v1`."""
    model_id: str
    """The model name to send in requests."""
    api_key: str
    """The gateway session key (equal to the runtime session id); it ties turns to the session."""
    sampling_params: dict[str, Any] = field(default_factory=dict)
    """Sampling the harness suggests; the gateway enforces its own session sampling anyway."""


def rollout_config(payload: Mapping[str, Any]) -> RolloutConfig:
    """The `_rollout` block of an invocation payload; ValueError if the harness did not add it."""
    block = payload.get(ROLLOUT_KEY) if isinstance(payload, Mapping) else None
    if not isinstance(block, Mapping):
        raise ValueError(
            f"the payload has no {ROLLOUT_KEY!r} block, so this agent was invoked outside the "
            "agentcore-rl harness; invoke it through the harness, or add "
            f"{ROLLOUT_KEY!r}: {{'base_url', 'model_id', 'api_key'}} to the payload yourself"
        )
    missing = [key for key in ("base_url", "model_id", "api_key") if not block.get(key)]
    if missing:
        raise ValueError(
            f"the payload's {ROLLOUT_KEY!r} block lacks {', '.join(missing)}; "
            f"it has {sorted(block)}"
        )
    return RolloutConfig(
        base_url=str(block["base_url"]),
        model_id=str(block["model_id"]),
        api_key=str(block["api_key"]),
        sampling_params=dict(block.get("sampling_params") or {}),
    )


def _openai() -> Any:
    try:
        import openai
    except ImportError as exc:
        raise MissingDependencyError(
            "the gateway clients need the OpenAI SDK: pip install 'agentcore-rl-harness[agent]' "
            "(or pip install openai)"
        ) from exc
    return openai


def gateway_client(payload: Mapping[str, Any]) -> "openai.OpenAI":
    """An `openai.OpenAI` client for this session's gateway; the model id is on `rollout_config`."""
    config = rollout_config(payload)
    return _openai().OpenAI(base_url=config.base_url, api_key=config.api_key)


def async_gateway_client(payload: Mapping[str, Any]) -> "openai.AsyncOpenAI":
    """An `openai.AsyncOpenAI` client for this session's gateway."""
    config = rollout_config(payload)
    return _openai().AsyncOpenAI(base_url=config.base_url, api_key=config.api_key)


# -- rollout_entrypoint -----------------------------------------------------------------------

_RESULT_KEY_FORMAT = "{exp_id}/{input_id}/{session_id}.json"


@dataclass(frozen=True)
class _S3Target:
    bucket: str
    key: str


def rollout_entrypoint(
    app: Any, *, s3_client_factory: Callable[[], Any] | None = None
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register `func` as the entrypoint of BedrockAgentCoreApp `app`, in either result mode.

        app = BedrockAgentCoreApp()

        @rollout_entrypoint(app)
        def invoke(payload, context): ...

    The payload's `_rollout` block picks the mode per invocation. Without `s3_bucket` (inline)
    the handler's return value is the HTTP answer (a generator streams as usual). With
    `s3_bucket`, `exp_id` and `input_id` (the S3 contract of agentcore-rl-toolkit) the call
    answers at once with `{"status": "accepted", "s3_bucket", "result_key"}` and the handler
    runs in a background thread, registered with `app.add_async_task` so `/ping` reports
    HealthyBusy until the result object is written: the result plus `status_code: 200`, or
    `{"status_code": 500, "error", "traceback"}` if the handler raised. A generator's last
    value is its result there. `func` may be sync or async and may take `context`; it is
    returned unchanged. `s3_client_factory` (default `boto3.client("s3")`) builds the writer.
    """

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        takes_context = _takes_context(func)
        writer = _S3Writer(s3_client_factory)

        def call(payload: Any, context: Any) -> Any:
            return func(payload, context) if takes_context else func(payload)

        def accept_in_background(payload: Any, context: Any) -> dict[str, Any] | None:
            target = _s3_target(payload, context)
            if target is None:
                return None
            task_id = app.add_async_task(f"rollout:{func.__name__}", {"result_key": target.key})
            run = contextvars.copy_context().run
            threading.Thread(
                target=run,
                args=(_run_and_write, app, task_id, lambda: call(payload, context), writer, target),
                name=f"rollout-{func.__name__}",
                daemon=True,
            ).start()
            return {"status": "accepted", "s3_bucket": target.bucket, "result_key": target.key}

        if inspect.iscoroutinefunction(func) or inspect.isasyncgenfunction(func):

            async def entry(payload: Any, context: Any) -> Any:
                accepted = accept_in_background(payload, context)
                if accepted is not None:
                    return accepted
                value = call(payload, context)
                return await value if inspect.isawaitable(value) else value

        else:

            def entry(payload: Any, context: Any) -> Any:  # type: ignore[misc]
                accepted = accept_in_background(payload, context)
                return accepted if accepted is not None else call(payload, context)

        entry.__name__ = getattr(func, "__name__", "rollout_entrypoint")
        entry.__doc__ = func.__doc__
        app.entrypoint(entry)
        return func

    return decorate


def _takes_context(func: Callable[..., Any]) -> bool:
    """BedrockAgentCoreApp's rule: a second parameter literally named `context`."""
    try:
        names = list(inspect.signature(func).parameters)
    except (TypeError, ValueError):
        return False
    return len(names) >= 2 and names[1] == "context"


def _s3_target(payload: Any, context: Any) -> _S3Target | None:
    block = payload.get(ROLLOUT_KEY) if isinstance(payload, Mapping) else None
    if not isinstance(block, Mapping) or not block.get("s3_bucket"):
        return None
    session_id = block.get("session_id") or getattr(context, "session_id", None)
    missing = [name for name, value in (("exp_id", block.get("exp_id")),
               ("input_id", block.get("input_id")), ("session_id", session_id)) if not value]
    if missing:
        raise ValueError(
            f"the payload's {ROLLOUT_KEY!r} block asks for an S3 result (s3_bucket) but lacks "
            f"{', '.join(missing)}; the harness sends exp_id, input_id and session_id with it"
        )
    key = block.get("result_key") or _RESULT_KEY_FORMAT.format(
        exp_id=block["exp_id"], input_id=block["input_id"], session_id=session_id
    )
    return _S3Target(bucket=str(block["s3_bucket"]), key=str(key))


class _S3Writer:
    """Builds its S3 client on first use (in the background thread, not at import)."""

    def __init__(self, factory: Callable[[], Any] | None) -> None:
        self._factory = factory
        self._client: Any = None
        self._lock = threading.Lock()

    def put(self, target: _S3Target, body: bytes) -> None:
        with self._lock:
            if self._client is None:
                self._client = (self._factory or _default_s3_client)()
        self._client.put_object(
            Bucket=target.bucket,
            Key=target.key,
            Body=body,
            ContentType="application/json",
        )


def _default_s3_client() -> Any:
    try:
        import boto3
    except ImportError as exc:
        raise MissingDependencyError(
            "writing rollout results to S3 needs boto3: pip install boto3 (bedrock-agentcore "
            "depends on it)"
        ) from exc
    return boto3.client("s3")


def _run_and_write(
    app: Any, task_id: int, work: Callable[[], Any], writer: _S3Writer, target: _S3Target
) -> None:
    """Run the handler to completion and write its result (or its failure) to S3."""
    try:
        try:
            body = json.dumps({**_as_result(_complete(work())), "status_code": 200})
        except Exception as exc:  # the handler's failure (or an unserialisable result) is data

            _logger.exception("rollout handler failed; writing an error result to %s", target.key)
            body = json.dumps(
                {
                    "status_code": 500,
                    "stop_reason": "error",
                    "error": f"{type(exc).__name__}: {exc}",
                    "traceback": traceback.format_exc(),
                }
            )
        try:
            writer.put(target, body.encode())
        except Exception:
            _logger.exception(
                "could not write the rollout result to s3://%s/%s; the harness will time out "
                "waiting for it",
                target.bucket,
                target.key,
            )
    finally:
        app.complete_async_task(task_id)


def _complete(value: Any) -> Any:
    """The final value of whatever the handler returned (awaited, or a generator's last item)."""
    if inspect.isawaitable(value):
        value = asyncio.run(_await(value))
    if inspect.isasyncgen(value):
        value = asyncio.run(_last_async(value))
    elif inspect.isgenerator(value):
        last = None
        for last in value:
            pass
        value = last
    return value


async def _await(awaitable: Any) -> Any:
    return await awaitable


async def _last_async(agen: Any) -> Any:
    last = None
    async for last in agen:
        pass
    return last


def _as_result(value: Any) -> dict[str, Any]:
    return dict(value) if isinstance(value, dict) else {"output": value}
