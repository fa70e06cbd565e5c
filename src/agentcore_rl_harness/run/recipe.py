"""`recipe=auto` in a run (the choices themselves are `recipe/`'s): the start-up choices applied
to the config before the model loads, the automatic warm-up with its train-row probes, and each
training step's adapter (signal accounting, a larger group when too few groups teach).

Only `run` and `train` modes choose; a resumed run keeps the choices its config.yaml recorded.
Nothing here holds the run: each function takes what it uses (the warm-up's `WarmUpRun`, the
recipe log) and returns what changes, such as the config after the start-up choices, for the run
to apply itself.
"""

from __future__ import annotations

import copy
import dataclasses
import importlib.util
import json
import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..config import ComposedConfig, HarnessConfig, composed_from
from ..errors import ConfigError, HarnessError
from ..gateway.forcing import SCRIPT_KEY, normalize_script
from ..records import Rollout
from ..recipe.choices import Choice, RecipeLog, read_recipe
from ..recipe.config import RecipeConfig
from ..recipe.exploration import Adaptation, Exploration
from ..recipe.explicit import explicit_keys, is_explicit
from ..recipe.initial_kl import InitialKL
from ..recipe.startup import StartupInputs, hidden_size, parameter_count, startup_choices
from ..tasks import TaskSpec, load_rows, oracle_result
from ..trainers.base import Trainer
from ..trainers.grpo import EXCLUDED_STATUSES
from .budget import RunBudget
from .cases import Case
from .warmup import WarmUpRun

ORACLE_ROWS = 32  # train rows whose oracle turns size max_tokens
PROBE_PHASE = "probe"


def chooses(config: HarnessConfig, *, mode: str, resumed: bool, shared: bool) -> bool:
    """Whether this run makes recipe=auto's choices: a new `run` or `train` (a resumed run keeps
    those its config.yaml recorded; a `pytest -n` worker follows its controller's config)."""
    return config.recipe.kind == "auto" and mode in ("run", "train") and not resumed and not shared


def start_up(composed: ComposedConfig, specs: Sequence[TaskSpec], *, write: Callable[[str], None],
             harness_built: bool) -> tuple[RecipeLog, ComposedConfig]:
    """The run's recipe log with the start-up choices (made before the harness is built), and
    the config with those applied that an explicit key does not override."""
    from ..recipe.dtypes import measure

    typed = composed.typed
    log = RecipeLog(write)
    log.explicit = explicit_keys(composed.overrides, composed.source)
    if harness_built:  # given built (a test's fakes): only the choices made while it runs
        log.observations["startup"] = "skipped: the harness was built before the run started"
        return log, composed
    if typed.trainer.trainer.kind == "local" and importlib.util.find_spec("torch") is None:
        return log, composed  # the harness names the missing package when it starts
    choices, observed = startup_choices(typed.recipe, startup_inputs(typed, specs), log.explicit, measure)
    log.observations.update(observed)
    resolved = copy.deepcopy(composed.resolved)
    for choice in choices:
        log.add(choice)
        if choice.applied:
            section, name = choice.key.split(".")
            resolved[section][name] = choice.value
    if not any(choice.applied for choice in choices):
        return log, composed
    return log, composed_from(resolved, overrides=composed.overrides, source=composed.source)


def startup_inputs(typed: Any, specs: Sequence[TaskSpec]) -> StartupInputs:
    from ..models import resolve_model

    trainer = typed.trainer.trainer
    local = trainer.kind == "local"
    try:
        model_dir = resolve_model(typed.model.name)
    except HarnessError:  # the harness says so when it loads the model
        model_dir = None
    cuda = cuda_bf16 = False
    if local and trainer.device != "cpu":
        import torch

        cuda = trainer.device.startswith("cuda") or (trainer.device == "auto" and torch.cuda.is_available())
        cuda_bf16 = cuda and torch.cuda.is_bf16_supported()
    turns, rows = oracle_turn_tokens(specs, model_dir, typed.eval.split)
    current: dict[str, Any] = {"sampling.max_tokens": typed.sampling.max_tokens}
    if local:  # the other trainer kinds get no dtype / LoRA choice (startup.py)
        current |= {"trainer.autocast_dtype": trainer.autocast_dtype, "trainer.serve_dtype": trainer.serve_dtype,
                    "trainer.lora_rank": trainer.lora_rank, "trainer.lr": trainer.lr}
    return StartupInputs(trainer_kind=trainer.kind, finetune=trainer.finetune if local else "lora",
                         serve_merged=trainer.serve_merged if local else False, cuda=cuda, cuda_bf16=cuda_bf16,
                         parameters=parameter_count(model_dir) if model_dir else None,
                         hidden_size=hidden_size(model_dir) if model_dir else None,
                         oracle_turn_tokens=turns, oracle_rows=rows, current=current)


def oracle_turn_tokens(specs: Sequence[TaskSpec], model_dir: Any, eval_split: str) -> tuple[list[int], int]:
    """Token lengths of the scripted oracle's assistant turns on up to ORACLE_ROWS train rows of
    each task (a reply as the chat template writes it: text, and each call as JSON in a tag)."""
    scripts = []
    for spec in specs:
        if spec.oracle is None:
            continue
        held_out = {str(row["id"]) for row in load_rows(spec, eval_split)}
        for row in [r for r in load_rows(spec, "train") if str(r["id"]) not in held_out][:ORACLE_ROWS]:
            try:
                result = oracle_result(spec, row)
                if SCRIPT_KEY in result:
                    scripts.append(normalize_script(result[SCRIPT_KEY]))
            except HarnessError:  # a broken oracle fails where it runs (the warm-up), not here
                break
    if not scripts or model_dir is None:
        return [], 0
    from ..models import load_tokenizer

    tokenizer = load_tokenizer(model_dir)
    lengths = []
    for script in scripts:
        for turn in script:
            calls = "".join(f"<tool_call>\n{json.dumps(call['function'])}\n</tool_call>"
                            for call in turn.get("tool_calls") or [])
            lengths.append(len(tokenizer.encode((turn.get("content") or "") + calls)) + 1)  # + end of turn
    return lengths, len(scripts)


# -- the automatic warm-up ----------------------------------------------------------------------

def warm_up(run: WarmUpRun, specs: Sequence[TaskSpec], log: RecipeLog | None, budget: RunBudget | None = None) -> bool:
    """The warm-up before RL: `warmup.enabled`'s fixed steps, or recipe=auto's (its choices go to
    `log`) when the base success on train rows is ~0 and every task has a scripted oracle; under
    a time budget recipe=auto's starts no chunk that would take it past `recipe.warmup_budget_share`
    of it. True when one ran."""
    from .warmup import warm_up as fixed_warm_up

    typed = run.config
    if typed.warmup.enabled:
        fixed_warm_up(run, specs)
        return True
    if log is None:
        return False
    why_not = _cannot_warm_up(typed, specs, log.explicit)
    if why_not:
        log.add(Choice("warmup", False, why_not, applied=False, at="warm-up"))
        log.save(run.run_dir)
        return False
    recipe = typed.recipe
    spent = budget.warm_up(recipe.warmup_budget_share) if budget is not None else lambda: None
    probes = [_probe(run, specs, steps=0)]
    log.observations["warmup_probes"] = probes
    if probes[0]["success"] > recipe.base_success_floor:
        log.add(Choice("warmup", False, f"base success {probes[0]['success']:.0%} on {probes[0]['rows']} "
                       f"train rows is above recipe.base_success_floor={recipe.base_success_floor}: RL has a "
                       "signal without one", at="warm-up"))
        log.save(run.run_dir)
        return False
    _chunked_warm_up(run, specs, probes, log, spent)
    return True


def _cannot_warm_up(typed: Any, specs: Sequence[TaskSpec], explicit: frozenset[str]) -> str | None:
    from ..trainers.registry import spec_for
    from .warmup import RowGuard, oracle_cases

    if is_explicit("warmup", explicit):
        return "warmup.enabled=false set explicitly"
    kind = typed.trainer.trainer.kind
    if not spec_for(kind).sft:
        return f"trainer={kind} has no supervised step to warm up with"
    try:
        oracle_cases(specs, RowGuard(specs, typed.eval.split))
    except (ConfigError, HarnessError) as exc:
        return f"no oracle demonstrations: {str(exc).split(';')[0]}"
    return None


def _chunked_warm_up(run: WarmUpRun, specs: Sequence[TaskSpec], probes: list[dict[str, Any]],
                     log: RecipeLog, spent: Callable[[], str | None]) -> None:
    """Supervised steps in chunks, a probe after each, until the threshold, the bound, or what
    `spent` says (the time budget's share) before a chunk."""
    from .warmup import WarmUp, collect

    typed = run.config
    recipe = typed.recipe
    demos = collect(run, specs, limit=typed.warmup.max_demonstrations or recipe.warmup_demonstrations)
    steps, over_budget, loss = 0, None, None
    while steps < recipe.warmup_max_steps and probes[-1]["success"] < recipe.warmup_threshold:
        over_budget = spent()
        if over_budget:
            break
        chunk = min(recipe.warmup_chunk_steps, recipe.warmup_max_steps - steps)
        loss = WarmUp(dataclasses.replace(typed.warmup, steps=chunk), trainer=run.trainer(),
                      trainer_kind=typed.trainer.trainer.kind, train_dir=run.run_dir / "train", write=run.write,
                      seed=typed.seed + steps).run(demos, source="oracle", loss_before=loss)["loss_after"]
        steps += chunk
        probes.append(_probe(run, specs, steps=steps))
    end = probes[-1]["success"]
    why = (f"reached recipe.warmup_threshold={recipe.warmup_threshold}" if end >= recipe.warmup_threshold
           else over_budget or f"stopped at the bound recipe.warmup_max_steps={recipe.warmup_max_steps}")
    trail = " -> ".join(f"{p['success']:.0%}" for p in probes)
    log.observations["warmup_probes"] = probes
    log.add(Choice("warmup", {"steps": steps, "probe_success": [p["success"] for p in probes]},
                   f"base success {probes[0]['success']:.0%} on {probes[0]['rows']} train rows is ~0 (<= "
                   f"recipe.base_success_floor={recipe.base_success_floor}) and the task has an oracle: "
                   f"{steps} supervised steps on {len(demos.items)} oracle demonstrations, probe success "
                   f"{trail}; {why}", at="warm-up"))
    log.save(run.run_dir)


def probe_rows(specs: Sequence[TaskSpec], eval_split: str, count: int, seed: int) -> list[tuple[TaskSpec, dict]]:
    """`count` train rows (never evaluation rows), seeded, spread over the tasks."""
    pools = []
    for spec in specs:
        held_out = {str(row["id"]) for row in load_rows(spec, eval_split)}
        rows = [row for row in load_rows(spec, "train") if str(row["id"]) not in held_out]
        random.Random(seed).shuffle(rows)
        pools.append([(spec, row) for row in rows])
    chosen = [pair for layer in zip(*pools) for pair in layer] if len(pools) > 1 else (pools[0] if pools else [])
    return chosen[:count]


def _probe(run: WarmUpRun, specs: Sequence[TaskSpec], *, steps: int) -> dict[str, Any]:
    """Success on the probe's train rows under the current policy (phase "probe", recorded)."""
    typed = run.config
    rows = probe_rows(specs, typed.eval.split, typed.recipe.probe_rows, typed.seed)
    cases = [Case(spec=spec, row=row, sample_index=0, phase=PROBE_PHASE, step=steps) for spec, row in rows]
    run.write(f"agentcore-rl recipe: probing success on {len(cases)} train rows after {steps} warm-up steps")
    scored = [r for r in run.roll_out(cases) if r.status not in EXCLUDED_STATUSES]
    success = sum(bool(r.success) for r in scored) / len(scored) if scored else 0.0
    return {"after_steps": steps, "rows": len(cases), "success": round(success, 4),
            "row_ids": [f"{c.spec.name}/{c.row_id}" for c in cases]}


# -- each training step -------------------------------------------------------------------------

class StepAdapter:
    """Adds the signal a step's line lacks (KL to the initial policy, the recipe's choices), stops
    training where the time budget says one more step would overrun it (`run/budget.py`), and
    raises the group size when recipe=auto's exploration calls for it (its choices go to `log`).
    `signal=False` (the async loop): the budget only."""

    def __init__(self, config: RecipeConfig, log: RecipeLog | None, *, run_dir: Path, trainer: Trainer,
                 group_size: int, steps: int, budget: RunBudget | None = None, signal: bool = True) -> None:
        self.log, self.run_dir, self.steps, self.budget, self.signal = log, run_dir, steps, budget, signal
        self.kl = InitialKL(config.kl_probe_traces, trainer.compute_logprobs)
        self.exploration = None if log is None or not signal else Exploration(
            config, group_size=group_size, explicit=is_explicit("algo.group_size", log.explicit))

    def __call__(self, line: dict[str, Any], rollouts: Sequence[Rollout]) -> Adaptation:
        fields: dict[str, Any] = {"recipe": []}
        if self.signal:
            fields["kl_initial"] = self.kl.measure([t for r in rollouts if r.status not in EXCLUDED_STATUSES
                                                    for t in r.traces])
        stop = self.budget.after_step(line, steps=self.steps) if self.budget is not None else None
        if stop is not None:
            fields["recipe"] = [stop.to_json()]
            return Adaptation(fields, stop=True)
        last = line["step"] >= self.steps  # no step left to sample differently
        room = self.budget.budget.room() if self.budget is not None else None
        choice = self.exploration.after_step(line, room=room) if self.exploration is not None and not last else None
        if choice is None or self.log is None:
            return Adaptation(fields)
        self.log.add(choice)
        self.log.save(self.run_dir)
        fields["recipe"] = [choice.to_json()]
        return Adaptation(fields, group_size=choice.value if choice.applied else None)


def recipe_of(log: RecipeLog | None, run_dir: Path, *, save: bool) -> dict[str, Any] | None:
    """The run's recipe for its report (saved to recipe.json first where `save`)."""
    if log is None:
        return read_recipe(run_dir)
    if save:
        log.save(run_dir)
    return log.to_json()
