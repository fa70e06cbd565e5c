"""The S3 result contract of awslabs' agentcore-rl-toolkit (ART), read by the harness.

The agent answers the invocation at once and later writes one JSON object to
`s3://{bucket}/{exp_id}/{input_id}/{session_id}.json` (or the `result_key` it answered with).
The harness polls with HEAD and a growing interval, then GETs the object. The object is the
agent's result plus envelope keys: `status_code` (200 = success; anything else is an agent
error, never a success) and, from ART, `stop_reason`, `input_id`, `s3_bucket`, `result_key`,
`payload`; `error` and `traceback` describe a failure. Envelope keys are not part of the result.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from ..records import Status
from ._acr_calls import SessionFailed, describe_failure

logger = logging.getLogger(__name__)

ENVELOPE_KEYS = frozenset(
    {"status_code", "stop_reason", "input_id", "s3_bucket", "result_key", "payload"}
)
_MISSING_CODES = frozenset({"404", "NoSuchKey", "NotFound"})
_FORBIDDEN_CODES = frozenset({"403", "AccessDenied", "Forbidden"})
_TRACEBACK_TAIL = 2000

Call = Callable[..., Awaitable[Any]]


def result_key(*, exp_id: str, input_id: str, session_id: str) -> str:
    return f"{exp_id}/{input_id}/{session_id}.json"


def with_s3_target(
    payload: dict[str, Any], *, exp_id: str, bucket: str, input_id: str, session_id: str
) -> tuple[dict[str, Any], str]:
    """`payload` whose `_rollout` asks for an S3 result (ART's exp_id, input_id, s3_bucket, plus
    result_key and session_id), and that result's key."""
    rollout = dict(payload.get("_rollout") or {})
    rollout.setdefault("session_id", session_id)
    key = result_key(exp_id=exp_id, input_id=input_id, session_id=session_id)
    rollout.update(exp_id=exp_id, input_id=input_id, s3_bucket=bucket, result_key=key)
    return {**payload, "_rollout": rollout}, key


@dataclass
class PollProgress:
    """What the poller saw for one session (for a useful timeout message)."""

    key: str | None = None
    polls: int = 0
    forbidden: int = 0


class S3ResultReader:
    """Waits for one session's result object; `call(fn, *args)` runs `fn` in a worker thread."""

    def __init__(
        self,
        *,
        client: Any,
        bucket: str,
        call: Call,
        poll_initial_s: float,
        poll_max_s: float,
        poll_backoff: float,
    ) -> None:
        self.client = client
        self.bucket = bucket
        self._call = call
        self.poll_initial_s = poll_initial_s
        self.poll_max_s = poll_max_s
        self.poll_backoff = poll_backoff
        self._warned_forbidden = False

    async def wait(self, key: str, progress: PollProgress) -> dict[str, Any]:
        """Poll until `key` exists, then read it; the caller's deadline bounds the wait."""
        progress.key = key
        delay = self.poll_initial_s
        while True:
            progress.polls += 1
            state = await self._call(self._head, key)
            if state == "found":
                break
            if state == "forbidden":
                progress.forbidden += 1
                self._warn_forbidden_once(key)
            await asyncio.sleep(delay)
            delay = min(delay * self.poll_backoff, self.poll_max_s)
        document = await self._call(self._get_json, key)
        return unwrap(document, f"s3://{self.bucket}/{key}")

    def _warn_forbidden_once(self, key: str) -> None:
        if self._warned_forbidden:
            return
        self._warned_forbidden = True
        logger.warning(
            "HEAD s3://%s/%s returned 403: without s3:ListBucket on the bucket S3 answers 403 "
            "for a missing key, so the harness treats 403 as 'not written yet' (logged once). "
            "Grant s3:ListBucket and s3:GetObject on the bucket to tell the two apart.",
            self.bucket,
            key,
        )

    def _head(self, key: str) -> str:
        from botocore.exceptions import ClientError

        try:
            self.client.head_object(Bucket=self.bucket, Key=key)
        except ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code"))
            if code in _MISSING_CODES:
                return "missing"
            if code in _FORBIDDEN_CODES:
                return "forbidden"
            raise _infra(exc, "HeadObject") from exc
        except Exception as exc:
            raise _infra(exc, "HeadObject") from exc
        return "found"

    def _get_json(self, key: str) -> Any:
        try:
            body = self.client.get_object(Bucket=self.bucket, Key=key)["Body"]
            try:
                data = body.read()
            finally:
                body.close()
        except Exception as exc:
            raise _infra(exc, "GetObject") from exc
        try:
            return json.loads(data)
        except ValueError:
            raise SessionFailed(
                Status.AGENT_ERROR,
                f"the result object s3://{self.bucket}/{key} is not JSON: {data[:200]!r}",
            ) from None


def unwrap(document: Any, where: str) -> dict[str, Any]:
    """The agent's result from a result object; `status_code` != 200 is an agent error."""
    if not isinstance(document, dict):
        raise SessionFailed(
            Status.AGENT_ERROR, f"the result object {where} is not a JSON object: {document!r:.200}"
        )
    status_code = document.get("status_code", 200)
    if status_code != 200:
        reason = document.get("error") or document.get("stop_reason") or "no reason given"
        message = f"agent wrote an error result (status_code {status_code}) to {where}: {reason}"
        trace = document.get("traceback")
        if trace:
            message += f"\n--- agent traceback (tail) ---\n{str(trace)[-_TRACEBACK_TAIL:]}"
        raise SessionFailed(Status.AGENT_ERROR, message)
    return {k: v for k, v in document.items() if k not in ENVELOPE_KEYS}


def _infra(exc: BaseException, operation: str) -> SessionFailed:
    failure = describe_failure(exc, operation)
    text = failure.text if failure else f"{operation} failed: {type(exc).__name__}: {exc}"
    return SessionFailed(Status.INFRA_ERROR, text)
