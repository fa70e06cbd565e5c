"""The judge backends, one small class each behind `JudgeClient` (one `async complete`).

`TokenJudge` samples through a `SamplingBackend` with a chat template's `Renderer`: the run's own
policy sampler (`kind=policy`, never through a gateway session, so a judge call cannot enter a
training trace) or a local HF model loaded for the judge (`kind=hf`). `OpenAIJudge` calls an
OpenAI-compatible endpoint with the `openai` package; `BedrockJudge` calls Bedrock's Converse
API with boto3. Their errors are translated into `JudgeCallError` at this seam.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import ConfigError, MissingDependencyError
from ..records import SamplingParams
from .config import JudgeConfig
from .protocol import Message

if TYPE_CHECKING:
    from ..gateway.rendering import Renderer
    from ..gateway.sampling import SamplingBackend


class JudgeCallError(Exception):
    """A judge call failed (the endpoint, the network, the model); the message says how."""


@dataclass(frozen=True)
class JudgeAnswer:
    text: str
    prompt_tokens: int
    completion_tokens: int


class JudgeClient(Protocol):
    """A judge model: answer chat messages. `identity` names it in cache keys."""

    identity: str

    async def complete(self, messages: Sequence[Message]) -> JudgeAnswer: ...

    async def aclose(self) -> None: ...


class TokenJudge:
    """A judge sampled token by token: the policy's sampler, or a local model's."""

    def __init__(self, *, sampler: SamplingBackend, renderer: Renderer, identity: str, config: JudgeConfig,
                 owned: bool = False) -> None:
        self.identity = identity
        self._sampler, self._renderer, self._config, self._owned = sampler, renderer, config, owned

    async def complete(self, messages: Sequence[Message]) -> JudgeAnswer:
        renderer = self._renderer
        prompt = renderer.encode(renderer.render(list(messages)))
        params = SamplingParams(temperature=self._config.temperature, max_tokens=self._config.max_tokens,
                                stop_token_ids=tuple(renderer.stop_token_ids))
        try:
            result = await self._sampler.sample(prompt_token_ids=prompt, params=params)
        except Exception as exc:
            raise JudgeCallError(f"the {self.identity} judge's sampler failed: {type(exc).__name__}: {exc}") from exc
        ids = list(result.token_ids)
        shown = ids[:-1] if ids and ids[-1] in renderer.stop_token_ids else ids
        return JudgeAnswer(renderer.decode(shown), len(prompt), len(ids))

    async def aclose(self) -> None:
        if self._owned:
            self._sampler.close()


def load_hf_judge(config: JudgeConfig) -> TokenJudge:
    """`kind=hf`: the named model or folder, loaded in this process for the judge alone."""
    from ..gateway.rendering import ChatTemplateRenderer
    from ..models import load_model, load_tokenizer, resolve_model
    from ..samplers.hf_local import HFLocalSampler

    folder = resolve_model(str(config.model))
    sampler = HFLocalSampler(load_model(folder))
    return TokenJudge(sampler=sampler, renderer=ChatTemplateRenderer(load_tokenizer(folder)),
                      identity=f"hf:{config.model}", config=config, owned=True)


class OpenAIJudge:
    """`kind=openai`: an OpenAI-compatible chat completions endpoint (OpenAI, vLLM, a gateway)."""

    def __init__(self, config: JudgeConfig) -> None:
        try:
            import openai
        except ImportError as exc:
            raise MissingDependencyError("roles.judge.kind=openai needs the openai package: pip install openai") from exc
        key = os.environ.get(config.api_key_env)
        if not key:
            raise ConfigError(
                f"roles.judge.kind=openai reads its API key from the environment variable "
                f"{config.api_key_env}, which is not set; export it (any non-empty value for an endpoint "
                "without keys, e.g. a local vLLM), or name another with roles.judge.api_key_env")
        base_url = config.base_url or os.environ.get("OPENAI_BASE_URL") or None
        self.identity = identity(config, policy_model=None)
        self._config = config
        self._errors = (openai.OpenAIError,)
        self._client = openai.AsyncOpenAI(api_key=key, base_url=base_url, timeout=config.timeout_s, max_retries=0)

    async def complete(self, messages: Sequence[Message]) -> JudgeAnswer:
        try:
            response = await self._client.chat.completions.create(
                model=str(self._config.model), messages=list(messages), temperature=self._config.temperature,
                max_tokens=self._config.max_tokens)
        except self._errors as exc:
            raise JudgeCallError(f"the {self.identity} judge failed: {type(exc).__name__}: {exc}") from exc
        usage = response.usage
        text = response.choices[0].message.content if response.choices else None
        return JudgeAnswer(text or "", usage.prompt_tokens if usage else 0, usage.completion_tokens if usage else 0)

    async def aclose(self) -> None:
        await self._client.close()


class BedrockJudge:
    """`kind=bedrock`: Bedrock's Converse API through boto3 (credentials from boto3's chain)."""

    def __init__(self, config: JudgeConfig, *, client: Any = None) -> None:
        """`client`: a `bedrock-runtime` client to use (a test's stubbed one); else one is made."""
        if client is None:
            try:
                import boto3
            except ImportError as exc:
                raise MissingDependencyError("roles.judge.kind=bedrock needs boto3: pip install boto3") from exc
            client = boto3.client("bedrock-runtime", region_name=config.region)
        self.identity = f"bedrock:{config.model}"
        self._config, self._client = config, client

    async def complete(self, messages: Sequence[Message]) -> JudgeAnswer:
        from botocore.exceptions import BotoCoreError, ClientError

        system = [{"text": m["content"]} for m in messages if m["role"] == "system"]
        turns = [{"role": m["role"], "content": [{"text": m["content"]}]} for m in messages if m["role"] != "system"]
        request = {"modelId": str(self._config.model), "messages": turns,
                   "inferenceConfig": {"maxTokens": self._config.max_tokens, "temperature": self._config.temperature}}
        if system:
            request["system"] = system
        try:
            response = await asyncio.to_thread(self._client.converse, **request)
        except (BotoCoreError, ClientError) as exc:
            raise JudgeCallError(f"the {self.identity} judge failed: {type(exc).__name__}: {exc}") from exc
        blocks = response["output"]["message"]["content"]
        usage = response.get("usage") or {}
        return JudgeAnswer("".join(block.get("text", "") for block in blocks),
                           int(usage.get("inputTokens", 0)), int(usage.get("outputTokens", 0)))

    async def aclose(self) -> None:
        pass


def identity(config: JudgeConfig, *, policy_model: str | None) -> str:
    """The judge's name in cache keys and usage lines (`kind:model[@endpoint]`)."""
    if config.kind == "policy":
        return f"policy:{policy_model}"
    if config.kind == "openai":
        return f"openai:{config.model}@{config.base_url or os.environ.get('OPENAI_BASE_URL') or 'api.openai.com'}"
    return f"{config.kind}:{config.model}"


def build_client(config: JudgeConfig, *, policy: tuple[SamplingBackend, Renderer, str] | None) -> JudgeClient:
    """The configured judge; `policy` (sampler, renderer, model id) serves `kind=policy`."""
    if config.kind == "policy":
        if policy is None:
            raise ConfigError(
                "roles.judge.kind=policy asks the run's own policy, and no policy is loaded here (rescore "
                "loads no model: only cached answers can be reused); set roles.judge.kind to hf, openai or "
                "bedrock with roles.judge.model")
        sampler, renderer, model_id = policy
        return TokenJudge(sampler=sampler, renderer=renderer, identity=f"policy:{model_id}", config=config)
    if config.kind == "hf":
        return load_hf_judge(config)
    if config.kind == "openai":
        return OpenAIJudge(config)
    return BedrockJudge(config)
