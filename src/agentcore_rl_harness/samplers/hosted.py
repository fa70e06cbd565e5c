"""`sampler=hosted`: the model the agent uses in production, as an evaluation baseline.

Every turn passes through the gateway to a hosted chat API (`gateway/passthrough.py`): any
OpenAI-compatible endpoint (`provider: openai`, `/v1/chat/completions`) or Amazon Bedrock's
Converse API through boto3 (`provider: bedrock`, `samplers/bedrock.py`). The agent and the rows
are the run's own, so `--agentcore-rl-compare` pairs this run with an RL-trained one row by row.
No token ids or logprobs come back from such an API: the rollouts have no traces, and training
(`run`, `train`, `collect`) on this sampler is refused. Credentials come only from the
environment (the variable `api_key_env` names; AWS's own chain for Bedrock), never from config.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError, SamplingError
from ..gateway.sampling import SamplingBackend
from ..records import SampleResult, SamplingParams, Usage

PROVIDERS = ("openai", "bedrock")
TRAINING_MODES = ("run", "train", "collect")


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


def check_mode(sampler_kind: str, mode: str) -> None:
    """A hosted model captures no tokens: only `eval` may run on it."""
    if sampler_kind == "hosted" and mode in TRAINING_MODES:
        raise ConfigError(
            f"--agentcore-rl {mode} with sampler=hosted: a hosted model returns no token ids or "
            "logprobs, so there is nothing to train on; run `--agentcore-rl eval` for the baseline, "
            "then compare a trained run with it (--agentcore-rl-compare BASELINE_RUN_DIR)")


class NoTokens(SamplingBackend):
    """The `SamplingBackend` beside a hosted model: token-level sampling is refused, by name."""

    def __init__(self, describe: str) -> None:
        self.describe = describe
        self.policy_version = 0

    async def sample(self, *, prompt_token_ids: Sequence[int], params: SamplingParams,
                     on_token: Any = None) -> SampleResult:
        raise SamplingError(f"sampler=hosted ({self.describe}) has no token-level access: it answers "
                            "chat turns only (no token ids, no logprobs); sample and score with sampler=hf")

    def close(self) -> None:
        return None


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


def openai_messages(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Internal messages (OpenAI-shaped already) as a chat completions request sends them."""
    out = []
    for message in messages:
        sent = {key: value for key, value in message.items() if key not in ("reasoning", "reasoning_content")}
        if sent.get("tool_calls"):
            sent["tool_calls"] = [{"id": call.get("id") or f"call_{i}", "type": "function",
                                   "function": call["function"]} for i, call in enumerate(sent["tool_calls"])]
        out.append(sent)
    return out


class OpenAIChat:
    """`ChatBackend` over an OpenAI-compatible `/chat/completions` endpoint (httpx)."""

    def __init__(self, settings: HostedSettings, *, environ: Mapping[str, str] = os.environ) -> None:
        import httpx

        self.settings = settings
        self.url = settings.url.rstrip("/")
        key = environ.get(settings.api_key_env, "")
        self._key_note = (f"the key in ${settings.api_key_env}" if key else
                          f"no key (${settings.api_key_env} is unset)")
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._client = httpx.AsyncClient(headers=headers, timeout=settings.timeout_s)
        self._sync = httpx.Client(headers=headers, timeout=min(settings.timeout_s, 30.0))

    def describe(self) -> str:
        return f"{self.settings.model} at {self.url}"

    def check(self) -> None:
        """Before any rollout: the endpoint answers, takes the key, and serves the model."""
        import httpx

        try:
            response = self._sync.get(f"{self.url}/models")
        except httpx.HTTPError as exc:
            raise ConfigError(self._unreachable(exc)) from exc
        if response.status_code in (401, 403):
            raise ConfigError(self._refused(response))
        if response.status_code == 200:
            listed = [m.get("id") for m in response.json().get("data", []) if isinstance(m, Mapping)]
            if listed and self.settings.model not in listed:
                raise ConfigError(f"sampler.hosted.model={self.settings.model!r} is not served at {self.url} "
                                  f"(its /models lists {listed[:10]}); set sampler.hosted.model to one of them")

    async def reply(self, *, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None,
                    params: SamplingParams) -> Any:
        import httpx

        from ..gateway.passthrough import ChatReply

        body: dict[str, Any] = {"model": self.settings.model, "messages": openai_messages(messages),
                                "temperature": params.temperature, "top_p": params.top_p,
                                "max_tokens": params.max_tokens}
        if tools:
            body["tools"] = list(tools)
        try:
            response = await self._client.post(f"{self.url}/chat/completions", json=body)
        except httpx.HTTPError as exc:
            raise SamplingError(self._unreachable(exc)) from exc
        if response.status_code in (401, 403):
            raise SamplingError(self._refused(response))
        if response.status_code == 404:
            raise SamplingError(f"hosted model {self.settings.model!r} not found at {self.url} (HTTP 404: "
                                f"{response.text[:300]}); check sampler.hosted.model")
        if response.status_code != 200:
            raise SamplingError(f"hosted model {self.describe()} answered HTTP {response.status_code}: "
                                f"{response.text[:300]}")
        data = response.json()
        choice = data["choices"][0]
        message = choice.get("message") or {}
        calls = [(c["function"]["name"], c["function"].get("arguments") or "{}") for c in message.get("tool_calls") or []]
        usage = data.get("usage") or {}
        return ChatReply(reply=parsed_reply(message.get("content") or "", calls),
                         finish_reason="length" if choice.get("finish_reason") == "length" else "stop",
                         usage=Usage(int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)))

    def _unreachable(self, exc: Exception) -> str:
        return (f"hosted model endpoint {self.url} is not reachable ({type(exc).__name__}: {exc}); check "
                "sampler.hosted.url (the API root, ending in /v1) and that the server is up")

    def _refused(self, response: Any) -> str:
        return (f"hosted model endpoint {self.url} refused {self._key_note} (HTTP {response.status_code}: "
                f"{response.text[:200]}); export a valid key in ${self.settings.api_key_env} "
                "(sampler.hosted.api_key_env names the variable)")

    def close(self) -> None:
        self._sync.close()
