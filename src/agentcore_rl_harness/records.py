"""Frozen records shared by every layer. Imports nothing of ours but `errors`.

These are the RL vocabulary of the harness: what a sampler returns (`SampleResult`), what the
gateway captures per session (`Trace`), and what the runner writes per episode (`Rollout`).
Field names follow the rollout record in DESIGN.md; `to_json` gives exactly that record.

Glossary (one meaning each, in code, docs and reports; docs/concepts.md says it for users):
- task: a test function declared with `@arl.task`: dataset, agent, rewards, success in its body.
- row: one dataset record; sample: the index of a repeated attempt at a row (`s0`, `s1`, ...).
- case: one row x one sample of a task (`run.cases.Case`), one pytest item.
- group: the cases of one row in one phase (and step); GRPO compares rewards inside it.
- episode: what the agent did for one case, not yet scored (`run.cases.Episode`, made by
  `run.episodes.EpisodeRunner`): its session's outcome and traces.
- agent session: where one episode runs (a local process, an AgentCore session); its id is the
  rollout's `session_id`. Gateway session: the gateway's record of the model calls made with
  that id as the key (`gateway.sessions.Session`), holding the episode's turns and traces.
- turn: one model call: one request to the gateway and the one reply it sampled.
- trace: one token sequence for training (`Trace`): token ids, loss mask, logprobs; the turns of
  a linear episode fold into one, a rewritten history starts another.
- rollout: the scored record of one case (`Rollout`), one line of rollouts.jsonl; the `rollout`
  fixture is its handle (`RolloutHandle`) while the test body decides its verdict.
"""

from __future__ import annotations

import dataclasses
import enum
import itertools
from dataclasses import dataclass, field
from typing import Any

from .errors import ChoiceError

SCHEMA_VERSION = 1


class Status(str, enum.Enum):
    """How a rollout ended. Agent failure is data; only infra_error means the harness failed."""

    COMPLETED = "completed"
    TASK_FAILED = "task_failed"
    TIMEOUT = "timeout"
    AGENT_ERROR = "agent_error"
    INFRA_ERROR = "infra_error"
    TASK_ERROR = "task_error"
    """The task's own code raised (a reward, the payload builder, a body's non-assertion error):
    a bug to fix, not a wrong answer; excluded from success rates and training, like infra_error."""
    LIMIT_EXCEEDED = "limit_exceeded"
    """The episode ran into one of its task's limits (`@task(limits=...)`; `error` names it): the
    agent's failure, counted in success rates, left out of training like a timeout."""
    JUDGE_ERROR = "judge_error"
    """A judged reward got no usable answer from the judge model (malformed after its retries, or
    the endpoint failed): never a silent 0; excluded from success rates and training."""


class HistoryMode(str, enum.Enum):
    """How the gateway builds a turn's prompt from the session's earlier turns."""

    EXACT = "exact"
    """Reuse the token ids the sampler produced (what the policy saw is what trains)."""
    TEMPLATE = "template"
    """Re-render the history with the chat template (a changed rendering starts a new trace)."""

    @classmethod
    def parse(cls, value: "str | HistoryMode", *, key: str = "gateway.history") -> "HistoryMode":
        """The mode `value` names; a ConfigError naming `key` and the choices otherwise."""
        try:
            return cls(value)
        except ValueError:
            choices = ", ".join(mode.value for mode in cls)
            raise ChoiceError(f"{key}={value!r} is not a history mode; choose one of {choices}") from None


HISTORY_MODES = tuple(mode.value for mode in HistoryMode)


class FinishReason(str, enum.Enum):
    STOP = "stop"
    LENGTH = "length"


@dataclass(frozen=True)
class SamplingParams:
    """What the trainer lets the sampler do for one turn. `top_k` 0 and `top_p` 1.0 mean off.

    The defaults are the harness's own: the `sampling.*` config keys (`SamplingConfig`), the
    gateway's sessions and its admin API take theirs from here (the packaged YAML repeats them,
    held equal by a test).
    """

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_tokens: int = 128
    stop_token_ids: tuple[int, ...] = ()
    seed: int | None = None


@dataclass(frozen=True)
class SessionLimits:
    """Bounds on one gateway session (None = unlimited). The defaults, sized for AgentCore
    Runtime's 8-hour sessions, are the harness's only copy: the `gateway.*` config keys and the
    `agentcore-rl gateway` flags take theirs from here.

    `max_turns` caps the model requests of a session; `context_budget_tokens` bounds prompt +
    reply of each turn; `idle_ttl_s` ends a session that made no request for that long (a turn
    being sampled counts as activity); `max_lifetime_s` ends it that long after it opened.
    """

    max_turns: int | None = 4096
    context_budget_tokens: int | None = None
    idle_ttl_s: float | None = 1800.0
    max_lifetime_s: float | None = 8 * 3600.0 + 900.0

    def check(self) -> None:
        """Raise `ValueError` naming the first limit that is not positive."""
        for name in ("max_turns", "context_budget_tokens", "idle_ttl_s", "max_lifetime_s"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ValueError(f"gateway.{name}={value!r} must be > 0, or null for no limit")


TASK_LIMIT_KEYS = ("max_tokens", "max_turns", "max_tool_calls", "timeout_s")


@dataclass(frozen=True)
class TaskLimits:
    """One task's limits per episode, on top of the run-wide ones (None = only the run's).

    `max_tokens`: tokens the policy samples over the episode (each turn's reply is cut to what is
    left); `max_turns`: model requests; `max_tool_calls`: tool calls in the model's replies;
    `timeout_s`: the episode's wall time (the stricter of this and `eval.timeout_s` applies).
    """

    max_tokens: int | None = None
    max_turns: int | None = None
    max_tool_calls: int | None = None
    timeout_s: float | None = None

    @classmethod
    def parse(cls, value: "TaskLimits | dict[str, Any] | None", *, where: str) -> "TaskLimits":
        """`value` (a dict or TaskLimits) checked; a ValueError saying what is wrong otherwise."""
        if value is None:
            return cls()
        if isinstance(value, TaskLimits):
            items = dataclasses.asdict(value)
        elif isinstance(value, dict):
            items = dict(value)
        else:
            raise ValueError(f"{where}: limits must be a dict such as {{'max_turns': 8, 'timeout_s': 60}}, "
                             f"got {type(value).__name__} {value!r}")
        unknown = sorted(set(items) - set(TASK_LIMIT_KEYS))
        if unknown:
            raise ValueError(f"{where}: unknown limit(s) {unknown}; valid limits: {list(TASK_LIMIT_KEYS)}")
        for name, number in items.items():
            whole = name != "timeout_s"
            kind = int if whole else (int, float)
            if number is None:
                continue
            if isinstance(number, bool) or not isinstance(number, kind) or not number > 0 or number != number:
                raise ValueError(
                    f"{where}: limits[{name!r}]={number!r} must be a positive "
                    f"{'integer' if whole else 'number of seconds'}, or None for the run's own limit")
        return cls(**{name: (None if v is None else (float(v) if name == "timeout_s" else int(v)))
                      for name, v in items.items()})

    def __bool__(self) -> bool:
        return any(getattr(self, name) is not None for name in TASK_LIMIT_KEYS)

    def set(self) -> dict[str, float | int]:
        """The limits given, by name."""
        return {name: getattr(self, name) for name in TASK_LIMIT_KEYS if getattr(self, name) is not None}


@dataclass(frozen=True)
class SampleResult:
    """One sampled continuation.

    `logprobs[i]` is log p(token_ids[i]) under softmax(logits / temperature) of the policy that
    sampled it (top-k / top-p truncation not folded in; temperature 0 means greedy and the
    logprob is taken at temperature 1). A stop token that ended the sample is included in
    `token_ids` (the model produced it, so it is trained).
    """

    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    finish_reason: FinishReason
    policy_version: int = 0


@dataclass(frozen=True)
class Trace:
    """One training row: a token sequence whose tail after `prompt_length` has masks and logprobs.

    `loss_mask[i]` and `logprobs[i]` describe `token_ids[prompt_length + i]`. The mask is 1 on
    tokens this sampler produced in this row and 0 on everything else (tool results, template
    glue). `logprobs[i]` is None where the token was not sampled by the gateway (never a made-up
    number).
    """

    token_ids: tuple[int, ...]
    prompt_length: int
    loss_mask: tuple[int, ...]
    logprobs: tuple[float | None, ...]
    finish_reason: str
    metadata: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        n = len(self.token_ids) - self.prompt_length
        if n < 0 or len(self.loss_mask) != n or len(self.logprobs) != n:
            raise ValueError(
                f"inconsistent trace: {len(self.token_ids)} tokens, prompt_length "
                f"{self.prompt_length}, {len(self.loss_mask)} mask entries, "
                f"{len(self.logprobs)} logprobs; mask and logprobs must cover the tokens after "
                "the prompt"
            )
        if None in itertools.compress(self.logprobs, self.loss_mask):  # C speed: 256k tokens in ~2 ms
            raise ValueError("a trained token (loss_mask 1) must carry its sampled logprob")

    def to_json(self) -> dict[str, Any]:
        return {
            "token_ids": list(self.token_ids),
            "prompt_length": self.prompt_length,
            "loss_mask": list(self.loss_mask),
            "logprobs": list(self.logprobs),
            "finish_reason": self.finish_reason,
            "metadata": dict(self.metadata),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Trace":
        return cls(
            token_ids=tuple(data["token_ids"]),
            prompt_length=int(data["prompt_length"]),
            loss_mask=tuple(data["loss_mask"]),
            logprobs=tuple(data["logprobs"]),
            finish_reason=data["finish_reason"],
            metadata=dict(data.get("metadata") or {}),
        )


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0


@dataclass(frozen=True)
class SessionOutcome:
    """What an AgentRuntime reports for one agent session (before the task scores it)."""

    status: Status
    result: dict[str, Any] | None
    error: str | None
    elapsed_s: float
    final_state: bytes | None = None  # the session's files at its end (gzip tar), when asked for
    final_state_error: str | None = None  # why they were not kept (too large, unreadable)


@dataclass(frozen=True)
class Rollout:
    """One finished episode: one line of rollouts.jsonl."""

    run_id: str
    task: str
    row_id: str
    sample_index: int
    group_id: str
    phase: str
    step: int | None
    session_id: str
    status: Status
    error: str | None
    reward: float | None
    rewards: dict[str, float]
    success: bool | None
    result: dict[str, Any] | None
    turns: int
    usage: Usage
    elapsed_s: float
    traces: tuple[Trace, ...]
    schema_version: int = SCHEMA_VERSION

    def replace(self, **changes: Any) -> "Rollout":
        return dataclasses.replace(self, **changes)

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": self.schema_version,
            "run_id": self.run_id,
            "task": self.task,
            "row_id": self.row_id,
            "sample_index": self.sample_index,
            "group_id": self.group_id,
            "phase": self.phase,
            "step": self.step,
            "session_id": self.session_id,
            "status": self.status.value,
            "error": self.error,
            "reward": self.reward,
            "rewards": dict(self.rewards),
            "success": self.success,
            "result": self.result,
            "turns": self.turns,
            "usage": dataclasses.asdict(self.usage),
            "elapsed_s": self.elapsed_s,
            "traces": [trace.to_json() for trace in self.traces],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Rollout":
        return cls(
            schema_version=int(data.get("schema_version", SCHEMA_VERSION)),
            run_id=data["run_id"],
            task=data["task"],
            row_id=str(data["row_id"]),
            sample_index=int(data["sample_index"]),
            group_id=data["group_id"],
            phase=data["phase"],
            step=data.get("step"),
            session_id=data["session_id"],
            status=Status(data["status"]),
            error=data.get("error"),
            reward=data.get("reward"),
            rewards=dict(data.get("rewards") or {}),
            success=data.get("success"),
            result=data.get("result"),
            turns=int(data.get("turns", 0)),
            usage=Usage(**(data.get("usage") or {})),
            elapsed_s=float(data.get("elapsed_s", 0.0)),
            traces=tuple(Trace.from_json(t) for t in data.get("traces") or ()),
        )
