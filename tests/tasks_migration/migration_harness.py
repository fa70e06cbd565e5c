"""Runs one migration case through the real parts: the gateway on loopback (sampling from a
`ScriptedSampler` until teacher forcing lands in the run core), the local runtime with the
session isolated, the pack's Strands agent, the session's kept files and the pack's rewards."""

from __future__ import annotations

import importlib.util
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentcore_rl_harness.runtimes.local_config import LocalRuntimeConfig
from agentcore_rl_harness.gateway.rendering import ChatTemplateRenderer, load_template
from agentcore_rl_harness.gateway.server import GatewayServer
from agentcore_rl_harness.records import SamplingParams
from agentcore_rl_harness.run.cases import Case, Episode
from agentcore_rl_harness.run.episodes import EpisodeRunner, CaseSettings
from agentcore_rl_harness.run.scoring import RolloutHandle
from agentcore_rl_harness.runtimes.local import LocalRuntime
from agentcore_rl_harness.samplers.scripted import ScriptedSampler
from agentcore_rl_harness.tasks import task_spec

PACK = Path(__file__).resolve().parents[2] / "tasks" / "migration"


def load_pack_module(name: str, filename: str):
    """A file of the pack imported under its own module name (its task file is test_migration.py,
    which pytest must not collect from here)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, PACK / filename)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def hermes_text(turn: dict[str, Any]) -> str:
    """A scripted assistant turn as the chatml_tools template's model writes it."""
    if "tool_calls" in turn:
        return "\n".join("<tool_call>\n" + json.dumps({"name": call["name"], "arguments": call["arguments"]})
                         + "\n</tool_call>" for call in turn["tool_calls"])
    return turn["content"]


def renderer_for(model_dir) -> ChatTemplateRenderer:
    from agentcore_rl_harness.models import load_tokenizer

    return ChatTemplateRenderer(load_tokenizer(model_dir), chat_template=load_template())


@dataclass
class Played:
    episode: Episode
    handle: RolloutHandle
    sampler: ScriptedSampler
    rewards: dict[str, float]


def recording_paths(app, paths: list[str]):
    """The gateway's ASGI app, appending each HTTP request's path to `paths` (which wire it used)."""
    async def recorded(scope, receive, send):
        if scope["type"] == "http":
            paths.append(scope["path"])
        await app(scope, receive, send)
    return recorded


async def play(task_fn, row: dict, replies, renderer: ChatTemplateRenderer, *,
               max_tokens: int = 1024, agent: str = "task", timeout_s: float = 240,
               runtime_config: LocalRuntimeConfig | None = None, paths: list[str] | None = None) -> Played:
    """Run `row` of the task `task_fn` with the model's replies scripted, then score it.
    `paths`: a list the gateway's request paths are appended to."""
    spec = task_spec(task_fn)
    sampler = ScriptedSampler(replies, encode=renderer.encode)
    server = GatewayServer(sampler=sampler, renderer=renderer, model_id="tiny")
    if paths is not None:
        server.app = recording_paths(server.app, paths)
    server.start()
    runtime = LocalRuntime(runtime_config or LocalRuntimeConfig(concurrency=1, startup_timeout_s=60))
    episode = None
    try:
        runner = EpisodeRunner(sessions=server.sessions, runtime=runtime, settings=CaseSettings(
            model_id="tiny", base_url=server.base_url, sampling=SamplingParams(max_tokens=max_tokens),
            agent=agent, timeout_s=timeout_s))
        episode = await runner.run(Case(spec=spec, row=row, sample_index=0, phase="eval"))
        handle = RolloutHandle(episode)
        rewards = {}
        if handle.status.value == "completed":
            rewards = {reward.name: await reward.fn(handle, row) for reward in spec.rewards}
        return Played(episode=episode, handle=handle, sampler=sampler, rewards=rewards)
    finally:
        if episode is not None:
            await episode.held.release()
        await runtime.aclose()
        server.stop()
