"""Blocking boto3 calls to the bedrock-agentcore data plane, and what their failures mean.

Everything here runs in a worker thread (the runtime never calls boto3 on its event loop).
Imported only when the `agentcore` runtime is used, so botocore is imported at the top.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectTimeoutError,
    EndpointConnectionError,
)

from ..records import Status
from ._results import ResultError, parse_invocation_body

# Error codes proving the request was refused before it reached the agent: safe to resend.
# A 500 (InternalServerException) is NOT here: the agent may already have run.
NOT_STARTED_CODES = frozenset(
    {
        "ThrottlingException",
        "TooManyRequestsException",
        "ServiceUnavailable",
        "ServiceUnavailableException",
        "SlowDown",
    }
)
# ACR's answer when the agent container failed the invocation (e.g. the handler raised).
AGENT_FAILED_CODES = frozenset({"RuntimeClientError"})
_TEXT_LIMIT = 2000


class SessionFailed(Exception):
    """The session ends as `status` with `error` (agent failure is data, not an exception)."""

    def __init__(self, status: Status, error: str) -> None:
        super().__init__(error)
        self.status = status
        self.error = error


@dataclass(frozen=True)
class InvokeReply:
    content_type: str
    body: bytes
    request_id: str | None


@dataclass(frozen=True)
class CallFailure:
    """A failed AWS call: whether it may be resent, the session status it means, and why."""

    retryable: bool
    status: Status
    code: str
    text: str


def invoke(
    client: Any, *, arn: str, session_id: str, qualifier: str, payload: bytes
) -> InvokeReply:
    """One InvokeAgentRuntime call, body read to the end (a streamed body included)."""
    response = client.invoke_agent_runtime(
        agentRuntimeArn=arn,
        runtimeSessionId=session_id,
        qualifier=qualifier,
        contentType="application/json",
        accept="application/json, text/event-stream",
        payload=payload,
    )
    stream = response["response"]
    try:
        body = stream.read()
    finally:
        stream.close()
    return InvokeReply(
        content_type=str(response.get("contentType") or ""),
        body=body,
        request_id=response.get("ResponseMetadata", {}).get("RequestId"),
    )


def stop(client: Any, *, arn: str, session_id: str, qualifier: str, client_token: str) -> None:
    """One StopRuntimeSession call; resends reuse `client_token`, so a stop is idempotent."""
    client.stop_runtime_session(
        agentRuntimeArn=arn,
        runtimeSessionId=session_id,
        qualifier=qualifier,
        clientToken=client_token,
    )


def describe_failure(exc: BaseException, operation: str) -> CallFailure | None:
    """What a boto3 exception means for the session; None if it is not an AWS/botocore error."""
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        meta = exc.response.get("ResponseMetadata", {})
        code = str(error.get("Code") or "Unknown")
        http_status = meta.get("HTTPStatusCode")
        text = (
            f"{operation} failed with {code} (HTTP {http_status}, request id "
            f"{meta.get('RequestId') or 'unknown'}): {_clip(str(error.get('Message') or ''))}"
        )
        retryable = code in NOT_STARTED_CODES or http_status == 429
        status = Status.AGENT_ERROR if code in AGENT_FAILED_CODES else Status.INFRA_ERROR
        return CallFailure(retryable=retryable, status=status, code=code, text=text)
    if isinstance(exc, (EndpointConnectionError, ConnectTimeoutError)):
        return CallFailure(
            retryable=True,
            status=Status.INFRA_ERROR,
            code=type(exc).__name__,
            text=f"{operation} could not connect ({exc}); the request was never sent",
        )
    if isinstance(exc, BotoCoreError):
        return CallFailure(
            retryable=False,
            status=Status.INFRA_ERROR,
            code=type(exc).__name__,
            text=f"{operation} failed: {type(exc).__name__}: {exc} (not resent: the request may "
            "have reached the agent)",
        )
    return None


def parse_result(reply: InvokeReply) -> dict[str, Any]:
    """The agent's answer: a JSON body, or the last `data:` event of a streamed body."""
    try:
        return parse_invocation_body(reply.body, reply.content_type)
    except ResultError as exc:
        raise SessionFailed(Status.AGENT_ERROR, str(exc)) from None



def _clip(text: str) -> str:
    return text if len(text) <= _TEXT_LIMIT else text[:_TEXT_LIMIT] + "..."
