"""`trainer=skyrl`: the Tinker adapter pointed at a self-hosted SkyRL Tinker API server.

SkyRL's server (`python -m skyrl.tinker.api`, NovaSky-AI/SkyRL) speaks the Tinker REST API of
one SDK generation, so the installed `tinker` SDK must match the server's SkyRL release; a
mismatch fails deep inside the first forward_backward (tinker >= 0.25 sends it as protobuf, which
skyrl 0.3.0 cannot decode; tinker 0.38 sends `optim_params`, which skyrl 0.4 does not accept).
The harness checks the pair at startup against `KNOWN_PAIRS`. The skyrl 0.3.0 / tinker 0.24.1
pair runs end to end on CPU (JAX backend, the `tiny` model) in tests/trainers/test_skyrl_server.py.

The server does not report its SkyRL release: `GET /` answers
`{"name": "Tinker API Mock", "version": "0.0.1", "endpoints": {...}}` with that version fixed in
the source (skyrl 0.3.0 and 0.4.x alike). So the release comes from `trainer.server_version`
when the root answers the placeholder; a server whose root reports a real version is checked
against it directly.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError, HarnessError
from .tinker import TinkerTrainer, TinkerTrainerConfig, check_algo, warn_sampling_temperature

PLACEHOLDER_VERSION = "0.0.1"
"""What `GET /` of SkyRL's Tinker API server reports as its version in every release so far."""
SERVER_NAME = "Tinker API Mock"
"""The `name` of that root answer."""
UNAUTHENTICATED_KEY = "tml-skyrl"
"""SkyRL checks no API key, but the SDK wants one (tinker >= 0.38 wants the `tml-` prefix)."""


@dataclass(frozen=True)
class VersionPair:
    """A SkyRL release range and the tinker SDK range known to work with it."""

    skyrl: str
    """A PEP 440 specifier on the SkyRL version, e.g. ">=0.4,<0.5"."""
    tinker: str
    """The matching specifier on the tinker SDK version."""
    note: str


KNOWN_PAIRS: tuple[VersionPair, ...] = (
    VersionPair(">=0.4,<0.5", ">=0.25,<0.26", "skyrl 0.4.x (Python >= 3.12) speaks tinker 0.25's API"),
    VersionPair("==0.3.0", "<=0.24.1", "skyrl 0.3.0 decodes forward_backward as JSON (tinker <= 0.24.1)"),
)


def _version(text: str, what: str) -> Any:
    from packaging.version import InvalidVersion, Version

    try:
        return Version(text)
    except InvalidVersion as exc:
        raise ConfigError(f"{what} {text!r} is not a version number (e.g. 0.4.1)") from exc


def required_tinker(server_version: str) -> VersionPair | None:
    """The known pair for this SkyRL release, or None when no working SDK is known."""
    from packaging.specifiers import SpecifierSet

    version = _version(server_version, "trainer.server_version")
    for pair in KNOWN_PAIRS:
        if version in SpecifierSet(pair.skyrl):
            return pair
    return None


def known_pairs_text() -> str:
    return "; ".join(f"skyrl{pair.skyrl} needs tinker{pair.tinker}" for pair in KNOWN_PAIRS)


def check_versions(*, server_version: str, sdk_version: str, base_url: str) -> VersionPair:
    """Raise a ConfigError naming exactly what to install unless the pair is known to work."""
    from packaging.specifiers import SpecifierSet

    pair = required_tinker(server_version)
    if pair is None:
        raise ConfigError(
            f"trainer=skyrl: the server at {base_url} runs skyrl {server_version}, for which no "
            f"working tinker SDK is known (known pairs: {known_pairs_text()}); run a known SkyRL "
            "release on the server, e.g. pip install 'skyrl[tinker]>=0.4,<0.5' there and "
            "pip install 'tinker>=0.25,<0.26' here"
        )
    if _version(sdk_version, "installed tinker") not in SpecifierSet(pair.tinker):
        raise ConfigError(
            f"trainer=skyrl: the server at {base_url} runs skyrl {server_version}, which needs "
            f"tinker{pair.tinker} ({pair.note}), but tinker {sdk_version} is installed here; "
            f"pip install 'tinker{pair.tinker}' (in a separate environment from trainer=tinker, "
            "which needs tinker>=0.38,<0.39)"
        )
    return pair


@dataclass(frozen=True)
class ServerInfo:
    name: str | None
    version: str | None


def probe_server(base_url: str, *, timeout_s: float = 10.0) -> ServerInfo:
    """`GET {base_url}/`: SkyRL's root endpoint names the server and a version."""
    import httpx

    url = base_url.rstrip("/") + "/"
    try:
        response = httpx.get(url, timeout=timeout_s)
        response.raise_for_status()
        body = response.json()
    except (httpx.HTTPError, ValueError) as exc:
        raise HarnessError(
            f"trainer=skyrl: cannot read the SkyRL server's root {url} ({type(exc).__name__}: {exc}); "
            "start the server (in a SkyRL checkout: uv run --extra tinker --extra jax -m "
            "skyrl.tinker.api --base-model <model> --backend jax --port 8000) and set "
            "trainer.base_url to it"
        ) from exc
    if not isinstance(body, dict):
        return ServerInfo(None, None)
    version = body.get("version")
    return ServerInfo(body.get("name"), str(version) if version is not None else None)


def server_version(config: SkyRLTrainerConfig, info: ServerInfo) -> str:
    """The SkyRL release to check: the server's own report when real, else `trainer.server_version`."""
    reported = info.version if info.version not in (None, PLACEHOLDER_VERSION) else None
    if reported and config.server_version and reported != config.server_version:
        raise ConfigError(
            f"trainer=skyrl: trainer.server_version={config.server_version} but the server at "
            f"{config.base_url} reports version {reported}; fix trainer.server_version or the URL"
        )
    version = reported or config.server_version
    if version is None:
        raise ConfigError(
            f"trainer=skyrl: the server at {config.base_url} does not report its SkyRL release "
            f"(GET / answers name={info.name!r}, version={info.version!r}, a fixed placeholder); set "
            "trainer.server_version to the version `pip show skyrl` prints on the server (known "
            f"pairs: {known_pairs_text()})"
        )
    return version


@dataclass(frozen=True)
class SkyRLTrainerConfig(TinkerTrainerConfig):
    """The `trainer` config group for `trainer=skyrl` (see `TinkerTrainerConfig` for the rest)."""

    kind: str = "skyrl"
    server_version: str | None = None
    """The server's SkyRL release (e.g. 0.4.1); needed because the server does not report it."""
    max_grad_norm: float | None = None
    """Must stay null: SkyRL's optim_step takes no gradient-clipping parameter."""
    check_versions: bool = True
    """Check the server's release against the installed SDK at startup (KNOWN_PAIRS)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.base_url:
            raise ConfigError(
                "trainer=skyrl needs trainer.base_url, the SkyRL Tinker API server's URL "
                "(e.g. --agentcore-rl-set trainer.base_url=http://127.0.0.1:8000)"
            )
        if self.max_grad_norm is not None:
            raise ConfigError(
                f"trainer=skyrl: trainer.max_grad_norm={self.max_grad_norm}, but SkyRL's optim_step "
                "takes only learning_rate, betas, eps and weight_decay (it would ignore the clip); "
                "set trainer.max_grad_norm=null"
            )
        if self.server_version is not None:
            required_tinker(self.server_version)


def build_trainer(*, section: Any, model_dir: Any, tokenizer: Any, config: Any) -> TinkerTrainer:
    """The registry's factory for `trainer=skyrl`: the version check, then the Tinker adapter."""
    from ..samplers.tinker import import_tinker

    tinker = import_tinker()
    trainer_config: SkyRLTrainerConfig = section.trainer
    check_algo(trainer_config, section.algo)
    if trainer_config.check_versions:
        info = probe_server(trainer_config.base_url)
        check_versions(server_version=server_version(trainer_config, info), sdk_version=tinker.__version__,
                       base_url=trainer_config.base_url)
    warn_sampling_temperature(trainer_config.kind, config.sampling.temperature)
    return TinkerTrainer(
        config=trainer_config,
        algo=section.algo,
        base_model=trainer_config.base_model or config.model.name,
        api_key=os.environ.get(trainer_config.api_key_env) or UNAUTHENTICATED_KEY,
    )
