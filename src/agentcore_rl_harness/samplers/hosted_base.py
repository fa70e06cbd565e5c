"""What both `sampler=hosted` providers share (`hosted.py`: OpenAI-compatible, `bedrock.py`:
Converse): the `sampler.hosted` node and a hosted reply read as the gateway's `ParsedReply`.
Apart from `hosted.py` so that `bedrock.py` needs nothing of it (no import circle)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError

PROVIDERS = ("openai", "bedrock")


@dataclass(frozen=True)
class HostedSettings:
    """The `sampler.hosted` node."""

    provider: str = "openai"  # openai: any OpenAI-compatible endpoint; bedrock: Converse through boto3
    model: str = ""  # the hosted model id (openai: as /v1/models lists it; bedrock: a model or profile id)
    url: str = "https://api.openai.com/v1"  # openai: the API root, ending in /v1
    api_key_env: str = "OPENAI_API_KEY"  # openai: the environment variable holding the key (unset: none sent)
    region: str | None = None  # bedrock: the AWS region (null: AWS_REGION / the profile's)
    timeout_s: float = 120.0  # per request

    def validate(self) -> None:
        if self.provider not in PROVIDERS:
            raise ConfigError(f"sampler.hosted.provider={self.provider!r}; valid choices: {list(PROVIDERS)}")
        if not self.model:
            raise ConfigError("sampler=hosted needs sampler.hosted.model: the hosted model's id (e.g. "
                              "gpt-4.1-mini, or a Bedrock model id such as amazon.nova-lite-v1:0)")
        if self.timeout_s <= 0:
            raise ConfigError(f"sampler.hosted.timeout_s={self.timeout_s} must be > 0 seconds")


def parsed_reply(content: str, calls: Sequence[tuple[str, Any]]) -> Any:
    """A hosted reply as the gateway's `ParsedReply`: (name, arguments as JSON text or a dict) per
    call. Arguments that are not a JSON object keep the reply as text, marked ill-formed, as the
    gateway's own parser does."""
    from ..gateway.rendering import ParsedReply
    from ..gateway.tool_formats import ToolCall

    tool_calls = []
    for name, arguments in calls:
        try:
            value = json.loads(arguments) if isinstance(arguments, str) else arguments
        except json.JSONDecodeError:
            value = None
        if not isinstance(value, dict):
            return ParsedReply(content=(content or "") + json.dumps({"name": name, "arguments": arguments}),
                               ill_formed=True)
        tool_calls.append(ToolCall(name=name, arguments=value))
    return ParsedReply(content=content or "", tool_calls=tuple(tool_calls))
