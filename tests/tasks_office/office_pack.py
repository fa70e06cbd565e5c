"""Helpers of the office pack's tests: the pack's modules, and a `ScriptedSampler` reply function
that plays each row's `_script` oracle through the real agent behind the real gateway.

`ScriptPlayer` stands in for the gateway's teacher forcing until it lands: it finds the row
whose task is in the prompt, counts the assistant turns since it, and answers with the next
scripted turn rendered through the session's chat template (the text the template writes for
that assistant message, up to its end-of-turn token).
"""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

PACK = Path(__file__).resolve().parents[2] / "tasks" / "office"


def load(name: str) -> Any:
    """A module of the pack (`agent`, `office_checks`, `make_office`, `test_office`)."""
    if str(PACK) not in sys.path:
        sys.path.insert(0, str(PACK))  # as pytest's rootdir-relative import gives the pack
    module_name = f"office_pack_{name}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, PACK / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


def rows(level: int | str) -> list[dict[str, Any]]:
    path = PACK / "data" / f"office-l{level}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def assistant_message(turn: dict[str, Any]) -> dict[str, Any]:
    """A scripted turn as an OpenAI chat assistant message."""
    if "tool_calls" in turn:
        return {"role": "assistant", "content": None, "tool_calls": [
            {"id": f"call-{index}", "type": "function",
             "function": {"name": call["name"], "arguments": json.dumps(call["arguments"])}}
            for index, call in enumerate(turn["tool_calls"])]}
    return {"role": "assistant", "content": turn["content"]}


def turn_text(renderer: Any, turn: dict[str, Any]) -> str:
    """What the chat template writes for this assistant turn, without its end-of-turn token."""
    base = [{"role": "user", "content": "x"}]
    prefix = renderer.render(base, add_generation_prompt=True)
    full = renderer.render([*base, assistant_message(turn)], add_generation_prompt=False)
    assert full.startswith(prefix), "the template does not render history as a prefix"
    text = full[len(prefix):]
    return text[: text.rindex(renderer.end_of_turn)]


Turns = Sequence[dict[str, Any]] | Callable[[int], dict[str, Any]]


class ScriptPlayer:
    """`(prompt_token_ids, params) -> reply text` for `ScriptedSampler`: task text -> its turns
    (a list, or a function of the turn index for agents that misbehave on purpose)."""

    def __init__(self, renderer: Any, scripts: dict[str, Turns]) -> None:
        self.renderer = renderer
        self.scripts = scripts
        base = [{"role": "user", "content": "x"}]
        self.generation_prompt = renderer.render(base, add_generation_prompt=True)[
            len(renderer.render(base, add_generation_prompt=False)):]

    def __call__(self, prompt_token_ids: Sequence[int], params: Any) -> str:
        prompt = self.renderer.decode(prompt_token_ids)
        at, task = max((prompt.rfind(task), task) for task in self.scripts)
        if at < 0:
            raise AssertionError(f"no scripted task in the prompt: ...{prompt[-300:]!r}")
        index = prompt.count(self.generation_prompt, at) - 1
        turns = self.scripts[task]
        turn = turns(index) if callable(turns) else turns[index]
        return turn_text(self.renderer, turn)


def task_spec_of(level: int | str) -> Any:
    """The harness's spec of the pack's task for `level` (1, 2, 3 or "1m")."""
    from agentcore_rl_harness.tasks import task_spec

    return task_spec(getattr(load("test_office"), f"test_office_level{level}"))


def run_cases(renderer: Any, cases_and_turns: Sequence[tuple[dict[str, Any], Turns]], *overrides: str,
              task: str | None = None) -> list:
    """Roll each (row, turns) out through a harness over a ScriptPlayer; score it as the harness
    scores rollouts itself (the sandbox comes from the episode); `task`: a task of the pack by name
    (default: the row's level's). -> [(rollout, episode)]."""
    from agentcore_rl_harness.config import compose_config
    from agentcore_rl_harness.run.cases import Case
    from agentcore_rl_harness.run.compose import Harness
    from agentcore_rl_harness.run.scoring import Scorer
    from agentcore_rl_harness.samplers.scripted import ScriptedSampler

    config = compose_config(["model=tiny", "report.progress=off", "runtime.concurrency=4",
                             "eval.timeout_s=240", *overrides]).typed
    player = ScriptPlayer(renderer, {row["task"]: turns for row, turns in cases_and_turns})
    harness = Harness(config, sampler=ScriptedSampler(player, encode=renderer.encode), renderer=renderer,
                      model_id="tiny")
    try:
        harness.start()
        from agentcore_rl_harness.tasks import task_spec

        cases = [Case(spec=task_spec(getattr(load("test_office"), task)) if task else task_spec_of(row["level"]),
                      row=row, sample_index=0, phase="eval")
                 for row, _ in cases_and_turns]
        futures = [harness.submit(case) for case in cases]
        scorer = Scorer(run_id="office", call=harness.call, fixtures=harness.offline_fixtures)
        results = []
        for case, future in zip(cases, futures):
            episode = future.result(timeout=600)
            try:
                results.append((scorer.score(case, episode), episode))
            finally:
                harness.loop.run(episode.held.release(), timeout=60)
        return results
    finally:
        harness.close()
