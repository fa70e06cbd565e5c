"""Helpers for agent code: read the harness's `_rollout` block and get a client for the gateway.

Agents import this module inside their own process, so it imports nothing heavy: `openai` is
loaded only when a client is asked for. Using it is optional; an agent may read
`payload["_rollout"]["base_url"]` and `["api_key"]` itself (the ART convention).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping

from .errors import MissingDependencyError

if TYPE_CHECKING:
    import openai

ROLLOUT_KEY = "_rollout"


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
