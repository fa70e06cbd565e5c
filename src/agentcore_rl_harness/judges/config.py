"""The `roles` node: models the run uses besides the policy, by role (`roles.judge`).

Credentials never live in config: an OpenAI-compatible judge reads its key from the environment
variable `roles.judge.api_key_env`; Bedrock uses boto3's own chain (environment, profile, role).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import ConfigError

JUDGE_KINDS = ("policy", "hf", "openai", "bedrock")


@dataclass(frozen=True)
class PriceTable:
    """USD per million tokens; with both unset, usage is reported without a cost."""

    prompt_per_mtok: float | None = None  # USD per million prompt (input) tokens
    completion_per_mtok: float | None = None  # USD per million completion (output) tokens

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float | None:
        if self.prompt_per_mtok is None and self.completion_per_mtok is None:
            return None
        return ((self.prompt_per_mtok or 0.0) * prompt_tokens
                + (self.completion_per_mtok or 0.0) * completion_tokens) / 1e6

    def validate(self, where: str) -> None:
        for name in ("prompt_per_mtok", "completion_per_mtok"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ConfigError(f"{where}.{name}={value} must be >= 0 (USD per million tokens), or null")


@dataclass(frozen=True)
class JudgeConfig:
    """The judge of judged rewards: which model, how it is asked, and what it costs."""

    kind: str = "policy"  # policy (the run's own sampler) | hf (a local model) | openai (an OpenAI-compatible endpoint) | bedrock (Converse)
    model: str | None = None  # hf: a named model or HF folder; openai: the model name; bedrock: the model id
    base_url: str | None = None  # openai: the endpoint, ending in /v1 (null: OPENAI_BASE_URL, else api.openai.com)
    api_key_env: str = "OPENAI_API_KEY"  # openai: the environment variable holding the API key
    region: str | None = None  # bedrock: the AWS region (null: boto3's default chain)
    temperature: float = 0.0  # the judge's sampling temperature (0: greedy)
    max_tokens: int = 512  # the longest answer the judge may give
    retries: int = 2  # re-asks after a malformed answer or a failed call; then the rollout is judge_error
    concurrency: int = 4  # judge calls in flight at once
    timeout_s: float = 120.0  # one judge call's time limit
    cache: bool = True  # keep answers in RUN_DIR/judge/cache.jsonl, keyed by (judge, rubric, transcript)
    price: PriceTable = field(default_factory=PriceTable)  # for the report's cost of this role

    def validate(self) -> None:
        if self.kind not in JUDGE_KINDS:
            raise ConfigError(f"roles.judge.kind={self.kind!r} is not supported; valid choices: {list(JUDGE_KINDS)}")
        if self.kind in ("hf", "openai", "bedrock") and not self.model:
            example = {"hf": "smollm2-135m-instruct", "openai": "gpt-4o-mini",
                       "bedrock": "anthropic.claude-3-haiku-20240307-v1:0"}[self.kind]
            raise ConfigError(f"roles.judge.kind={self.kind} needs roles.judge.model (e.g. "
                              f"roles.judge.model={example})")
        if self.retries < 0:
            raise ConfigError(f"roles.judge.retries={self.retries} must be >= 0")
        for name in ("concurrency", "max_tokens"):
            if getattr(self, name) < 1:
                raise ConfigError(f"roles.judge.{name}={getattr(self, name)} must be >= 1")
        if not self.timeout_s > 0 or self.temperature < 0:
            raise ConfigError(f"roles.judge.timeout_s={self.timeout_s} must be > 0 and "
                              f"roles.judge.temperature={self.temperature} >= 0")
        self.price.validate("roles.judge.price")


@dataclass(frozen=True)
class PolicyRoleConfig:
    """The policy's own role, for the report's usage table."""

    price: PriceTable = field(default_factory=PriceTable)  # what the policy's tokens cost (a hosted policy)


@dataclass(frozen=True)
class RolesConfig:
    """Models by role: the policy being trained, and the judge of judged rewards."""

    judge: JudgeConfig = field(default_factory=JudgeConfig)  # the judge of @arl.judge_reward rewards
    policy: PolicyRoleConfig = field(default_factory=PolicyRoleConfig)  # the policy's price

    def validate(self) -> None:
        self.judge.validate()
        self.policy.price.validate("roles.policy.price")
