"""The `gateway` node: where the gateway serves, and the per-session policy and limits.

`GatewayConfig` is both the `gateway` config group's typed node and what `GatewayServer` takes;
what the run derives (the `sampling` node, the model's context window) is passed to the server
beside it. The limits' defaults are `records.SessionLimits`' (sized for 8-hour AgentCore
sessions); None = unlimited.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import ConfigError
from ..records import HISTORY_MODES, SessionLimits
from ..serving import is_loopback

_LIMITS = SessionLimits()


@dataclass(frozen=True)
class GatewayTLS:
    """Serve HTTPS directly (PEM files); see the gateway docs: Reaching the gateway from AgentCore."""

    certfile: str | None = None  # PEM certificate (chain) the gateway serves HTTPS with
    keyfile: str | None = None  # its PEM private key


@dataclass(frozen=True)
class GatewayConfig:
    """The gateway's listener and session policy (`gateway.*`; the `gateway` CLI's flags)."""

    host: str = "127.0.0.1"  # the wires' listen address (0.0.0.0: every interface)
    port: int = 0  # the wires' port (0: a free port)
    max_body_bytes: int = 8 * 1024 * 1024  # the largest request body accepted (413 above)
    public_url: str | None = None  # the URL agents are given (ending in /v1; runtime=agentcore); null = the gateway's own
    history: str = "exact"  # a turn's prompt from the sampled ids (exact) or the template's re-rendering (template)
    gc_freeze: bool = False  # gc.freeze() after start: fewer full-collection pauses under load (process-wide)
    lenient_history: bool = False  # accept tool results that answer no tool call (real APIs: 400)
    max_turns: int | None = _LIMITS.max_turns  # model requests per session; the next one is a 429
    idle_ttl_s: float | None = _LIMITS.idle_ttl_s  # a session with no request this long expires (401 session_expired)
    max_lifetime_s: float | None = _LIMITS.max_lifetime_s  # seconds after it opened, a session expires
    context_budget_tokens: int | None = _LIMITS.context_budget_tokens  # prompt + reply tokens per turn; null = the model's context
    tls: GatewayTLS = field(default_factory=GatewayTLS)  # serve HTTPS directly
    tls_terminated_upstream: bool = False  # runtime=agentcore: plain HTTP is allowed, TLS is terminated in front
    admin_port: int = 0  # the loopback admin listener when host is not loopback (0: a free port)
    separate_admin: bool | None = None  # admin API on its own loopback listener; null = when host is not loopback
    failed_key_limit: int | None = 30  # unknown session keys / admin tokens per peer per minute, then 429 (null: off)
    keep_alive_s: int = 75  # idle keep-alive timeout: must outlive clients' (httpx 5 s, ALB 60 s)
    start_timeout_s: float = 10.0  # seconds the listener may take to start
    reap_interval_s: float = 1.0  # how often expired sessions are closed

    @property
    def admin_apart(self) -> bool:
        return self.separate_admin if self.separate_admin is not None else not is_loopback(self.host)

    def limits(self) -> SessionLimits:
        return SessionLimits(max_turns=self.max_turns, context_budget_tokens=self.context_budget_tokens,
                             idle_ttl_s=self.idle_ttl_s, max_lifetime_s=self.max_lifetime_s)

    def validate(self) -> None:
        if self.history not in HISTORY_MODES:
            raise ConfigError(f"gateway.history={self.history!r} is not supported; valid choices: "
                              f"{list(HISTORY_MODES)}")
        try:
            self.limits().check()
        except ValueError as exc:
            raise ConfigError(f"{exc} (set it with --agentcore-rl-set gateway.<key>=<value>)") from exc
