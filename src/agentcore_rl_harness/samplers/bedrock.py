"""`sampler=hosted` with `provider: bedrock`: Amazon Bedrock's Converse API through boto3.

The gateway's internal messages (OpenAI-shaped, `gateway/messages.py`) become Converse's: system
messages go to `system`, an assistant's tool calls become `toolUse` blocks, and tool results
(`role: tool`) become `toolResult` blocks of one user message (Converse alternates user and
assistant). Credentials come from AWS's own chain (environment, profile, role), never from config.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import ConfigError, SamplingError
from ..records import SamplingParams, Usage
from .hosted import HostedSettings, parsed_reply

# Converse error codes -> what the user must fix.
_CREDENTIALS = ("UnrecognizedClientException", "AccessDeniedException", "ExpiredTokenException",
                "InvalidSignatureException")
_MISSING_MODEL = ("ResourceNotFoundException",)


def converse_request(messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None,
                     params: SamplingParams, model: str) -> dict[str, Any]:
    """The `converse` keyword arguments for one turn."""
    system = [{"text": m.get("content") or ""} for m in messages if m["role"] == "system"]
    turns: list[dict[str, Any]] = []

    def add(role: str, blocks: list[dict[str, Any]]) -> None:
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})

    for message in messages:
        role, text = message["role"], message.get("content") or ""
        if role == "user":
            add("user", [{"text": text}])
        elif role == "tool":
            add("user", [{"toolResult": {"toolUseId": message["tool_call_id"], "content": [{"text": text}]}}])
        elif role == "assistant":
            blocks: list[dict[str, Any]] = [{"text": text}] if text else []
            for call in message.get("tool_calls") or ():
                arguments = call["function"].get("arguments") or "{}"
                blocks.append({"toolUse": {"toolUseId": call["id"], "name": call["function"]["name"],
                                           "input": json.loads(arguments) if isinstance(arguments, str) else arguments}})
            add("assistant", blocks or [{"text": " "}])
    request: dict[str, Any] = {
        "modelId": model, "messages": turns,
        "inferenceConfig": {"maxTokens": params.max_tokens, "temperature": params.temperature, "topP": params.top_p},
    }
    if system:
        request["system"] = system
    if tools:
        request["toolConfig"] = {"tools": [{"toolSpec": {
            "name": tool["function"]["name"], "description": tool["function"].get("description") or tool["function"]["name"],
            "inputSchema": {"json": tool["function"].get("parameters") or {"type": "object", "properties": {}}},
        }} for tool in tools]}
    return request


class BedrockChat:
    """`ChatBackend` over `bedrock-runtime` `converse` (a sync boto3 call, run in a thread)."""

    def __init__(self, settings: HostedSettings, *, client: Any = None) -> None:
        self.settings = settings
        if client is None:
            try:
                import boto3
            except ImportError as exc:
                raise ConfigError("sampler.hosted.provider=bedrock needs boto3: pip install boto3") from exc
            session = boto3.Session(region_name=settings.region)
            if session.get_credentials() is None:
                raise ConfigError("sampler.hosted.provider=bedrock: no AWS credentials found; export "
                                  "AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (or AWS_PROFILE) in the environment")
            if session.region_name is None:
                raise ConfigError("sampler.hosted.provider=bedrock: no AWS region; set sampler.hosted.region "
                                  "or export AWS_REGION")
            client = session.client("bedrock-runtime")
        self.client = client

    def describe(self) -> str:
        return f"{self.settings.model} on Bedrock ({self.client.meta.region_name})"

    def check(self) -> None:
        """Credentials and region were checked when the client was built; probing the model would
        cost a billed call, so a wrong model id is reported by the first turn."""

    async def reply(self, *, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None,
                    params: SamplingParams) -> Any:
        from ..gateway.passthrough import ChatReply

        request = converse_request(messages, tools, params, self.settings.model)
        response = await asyncio.to_thread(self._converse, request)
        blocks = response["output"]["message"]["content"]
        text = "".join(block.get("text", "") for block in blocks)
        calls = [(block["toolUse"]["name"], block["toolUse"].get("input") or {}) for block in blocks if "toolUse" in block]
        usage = response.get("usage") or {}
        return ChatReply(reply=parsed_reply(text, calls),
                         finish_reason="length" if response.get("stopReason") == "max_tokens" else "stop",
                         usage=Usage(int(usage.get("inputTokens") or 0), int(usage.get("outputTokens") or 0)))

    def _converse(self, request: dict[str, Any]) -> dict[str, Any]:
        from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

        where = self.describe()
        try:
            return self.client.converse(**request)
        except NoCredentialsError as exc:
            raise SamplingError(f"{where}: no AWS credentials; export AWS_ACCESS_KEY_ID / "
                                "AWS_SECRET_ACCESS_KEY (or AWS_PROFILE)") from exc
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            message = exc.response.get("Error", {}).get("Message", "")
            if code in _CREDENTIALS:
                raise SamplingError(f"{where} refused the AWS credentials ({code}: {message}); check the "
                                    "environment's AWS credentials and their bedrock:InvokeModel permission") from exc
            if code in _MISSING_MODEL or "model identifier is invalid" in message.lower():
                raise SamplingError(f"hosted model {self.settings.model!r} not found on Bedrock ({code}: "
                                    f"{message}); check sampler.hosted.model and sampler.hosted.region") from exc
            raise SamplingError(f"{where} failed ({code}: {message})") from exc
        except BotoCoreError as exc:
            raise SamplingError(f"{where} is not reachable ({type(exc).__name__}: {exc}); check "
                                "sampler.hosted.region and the network") from exc

    def close(self) -> None:
        return None
