"""The supervised warm-up before RL (`warmup.*`): demonstrations from train rows, then SFT steps.

Where RL has no signal (base success near 0, every GRPO group constant), a few supervised steps
on demonstrations give it one. Demonstrations come from

    oracle        each train row's oracle episode, teacher-forced through the task's own agent
                  (`_script` oracles, `gateway/forcing.py`): recorded with phase "demo"
    run:DIR       the successful rollouts of a recorded run, on this run's train rows
    dataset:PATH  a JSONL of conversations ({"task", "row_id" | "split": "train", "messages",
                  "tools"?}), rendered through the policy's chat template

and are trained on the assistant tokens only (the traces' loss mask), through the trainer's
`sft_step` (`trainers/sft.py`). Only train rows ever reach the trainer: every demonstration is
checked against the train split and against the evaluation split (`eval.split`), and one that
names an evaluation row (or no train row) is dropped and counted in `train/warmup.json`.
"""

from __future__ import annotations

import dataclasses
import json
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config import HarnessConfig, WarmupConfig
from ..errors import ConfigError, HarnessError
from ..gateway.forcing import forced_tokens
from ..gateway.rendering import Renderer, normalize_messages
from ..records import Rollout, Trace
from ..tasks import TaskSpec, load_rows
from ..trainers.base import Trainer
from ..trainers.sft import require_sft, trained_traces
from .cases import DEMO_PHASE, Case
from .sanity import plan_agent

WARMUP_FILE = "warmup.json"
STEPS_FILE = "warmup.jsonl"


@dataclass(frozen=True)
class WarmUpRun:
    """What the warm-up (and recipe=auto's probes, `recipe.py`) use of their run: nothing else of it."""

    config: HarnessConfig
    run_dir: Path
    trainer: Callable[[], Trainer]  # the run's trainer, built on first use
    renderer: Renderer  # the policy's chat template (`dataset:` demonstrations)
    roll_out: Callable[[list[Case]], list[Rollout]]  # run the cases; each rollout scored and recorded
    write: Callable[[str], None]


@dataclass(frozen=True)
class Demonstration:
    task: str
    row_id: str | None  # None: a dataset line marked "split": "train" that names no row
    trace: Trace


@dataclass(frozen=True)
class Demonstrations:
    items: tuple[Demonstration, ...]
    dropped: dict[str, int]  # why demonstrations were left out -> how many

    def traces(self) -> list[Trace]:
        return [d.trace for d in self.items]


class RowGuard:
    """Which (task, row id) pairs a demonstration may come from: train rows that are not
    evaluation rows."""

    def __init__(self, specs: Sequence[TaskSpec], eval_split: str) -> None:
        self.allowed: dict[str, set[str]] = {}
        self.held_out: dict[str, set[str]] = {}
        for spec in specs:
            held_out = {str(row["id"]) for row in load_rows(spec, eval_split)}
            self.held_out[spec.name] = held_out
            self.allowed[spec.name] = {str(row["id"]) for row in load_rows(spec, "train")} - held_out

    def verdict(self, task: str, row_id: str | None) -> str | None:
        """None when allowed, else why not."""
        if task not in self.allowed:
            return "task_not_in_run"
        if row_id is not None and row_id in self.held_out[task]:
            return "evaluation_row"
        if row_id is not None and row_id not in self.allowed[task]:
            return "not_a_train_row"
        return None

    def keep(self, demos: Sequence[Demonstration], dropped: dict[str, int] | None = None) -> Demonstrations:
        dropped = dict(dropped or {})
        kept = []
        for demo in demos:
            why = self.verdict(demo.task, demo.row_id)
            if why is None:
                kept.append(demo)
            else:
                dropped[why] = dropped.get(why, 0) + 1
        return Demonstrations(items=tuple(kept), dropped=dropped)


def from_rollouts(rollouts: Sequence[Rollout]) -> tuple[list[Demonstration], dict[str, int]]:
    """The traces of successful rollouts (with trained tokens) as demonstrations."""
    demos, dropped = [], {}
    for rollout in rollouts:
        traces = trained_traces(rollout.traces)
        if not rollout.success or not traces:
            why = "not_successful" if not rollout.success else "no_trained_tokens"
            dropped[why] = dropped.get(why, 0) + 1
            continue
        demos += [Demonstration(rollout.task, rollout.row_id, trace) for trace in traces]
    return demos, dropped


def from_run(run_dir: Path) -> tuple[list[Demonstration], dict[str, int]]:
    path = run_dir / "rollouts.jsonl"
    if not path.is_file():
        raise ConfigError(f"warmup.source=run:{run_dir}: {path} does not exist; name a run directory")
    rollouts = [Rollout.from_json(json.loads(line)) for line in path.read_text().splitlines() if line.strip()]
    return from_rollouts(rollouts)


def render_conversation(renderer: Renderer, messages: Sequence[Mapping[str, Any]],
                        tools: Sequence[Mapping[str, Any]] | None = None) -> Trace:
    """One conversation as a training row: the template's rendering, mask 1 on the assistant
    turns' tokens (each up to its end-of-turn token), 0 elsewhere. Logprobs of the trained
    tokens are 0.0 (nobody sampled them; a supervised loss does not read them)."""
    normalised = normalize_messages(messages)
    render = renderer.render_normalized
    ids: list[int] = []
    mask: list[int] = []
    prompt_length = None
    done = ""
    for index, message in enumerate(normalised):
        if message["role"] != "assistant":
            continue
        head = render(normalised[:index], tools=tools, add_generation_prompt=True)
        if not head.startswith(done):
            raise ValueError(f"the chat template renders the history before message {index} differently "
                             "from how it rendered it earlier; this conversation cannot be one exact row")
        context = renderer.encode(head[len(done):])
        ids += context
        mask += [0] * len(context)
        if prompt_length is None:
            prompt_length = len(ids)
        reply = forced_tokens(renderer, normalised[:index], message, tools)
        ids += reply
        mask += [1] * len(reply)
        done = head + renderer.decode(reply)
    if prompt_length is None:
        raise ValueError("the conversation has no assistant message: nothing to learn from")
    trained = mask[prompt_length:]
    return Trace(token_ids=tuple(ids), prompt_length=prompt_length, loss_mask=tuple(trained),
                 logprobs=tuple(0.0 if m else None for m in trained), finish_reason="stop",
                 metadata={"demonstration": True, "forced_logprobs": "zero"})


def from_dataset(path: Path, renderer: Renderer,
                 default_task: str | None) -> tuple[list[Demonstration], dict[str, int]]:
    """Conversations from a JSONL file; each line names a train row (`row_id`) or `split: train`."""
    if not path.is_file():
        raise ConfigError(f"warmup.source=dataset:{path}: no such file; give a JSONL of conversations")
    demos, dropped = [], {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        where = f"warmup.source=dataset:{path} line {number}"
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{where} is not JSON: {exc}") from exc
        if not isinstance(data, dict) or not isinstance(data.get("messages"), list):
            raise ConfigError(f"{where} needs a 'messages' list (OpenAI chat messages)")
        task = data.get("task", default_task)
        row_id = None if data.get("row_id") is None else str(data["row_id"])
        if task is None:
            raise ConfigError(f"{where} names no 'task', and the run has several tasks")
        if row_id is None and data.get("split") != "train":
            if data.get("split") is not None:
                dropped["evaluation_row"] = dropped.get("evaluation_row", 0) + 1
                continue
            raise ConfigError(f"{where} names no 'row_id' (a train row of task {task}) and no "
                              "\"split\": \"train\"; the warm-up learns from train rows only")
        try:
            trace = render_conversation(renderer, data["messages"], data.get("tools"))
        except (ValueError, HarnessError) as exc:
            raise ConfigError(f"{where}: {exc}") from exc
        demos.append(Demonstration(task, row_id, trace))  # row_id None: a train-split line
    return demos, dropped


def oracle_cases(specs: Sequence[TaskSpec], guard: RowGuard) -> list[Case]:
    """One teacher-forced oracle case per train row; every task must have a `_script` oracle."""
    cases = []
    for spec in specs:
        rows = [row for row in load_rows(spec, "train") if guard.verdict(spec.name, str(row["id"])) is None]
        if spec.oracle is None:
            raise ConfigError(f"warmup.source=oracle: task {spec.name} declares no oracle; declare one "
                              "with a _script, or use warmup.source=run:DIR or dataset:PATH")
        if rows and plan_agent(spec, rows[0], "oracle").script is None:
            raise ConfigError(f"warmup.source=oracle: task {spec.name}'s oracle has no _script, so its "
                              "agent never talks to the model and leaves no conversation to learn from; "
                              "give the oracle a _script of assistant turns")
        cases += [Case(spec=spec, row=row, sample_index=0, phase=DEMO_PHASE, agent="oracle") for row in rows]
    return cases


def cap(demos: Demonstrations, limit: int | None, seed: int) -> Demonstrations:
    if limit is None or len(demos.items) <= limit:
        return demos
    chosen = random.Random(seed).sample(range(len(demos.items)), limit)
    return dataclasses.replace(demos, items=tuple(demos.items[i] for i in sorted(chosen)))


class WarmUp:
    """SFT steps over the demonstrations in a seeded, epoch-cycling order."""

    def __init__(self, config: WarmupConfig, *, trainer: Trainer, trainer_kind: str, train_dir: Path,
                 write: Callable[[str], None], seed: int) -> None:
        require_sft(trainer_kind)
        self.config, self.trainer, self.train_dir, self.write, self.seed = config, trainer, train_dir, write, seed

    def run(self, demos: Demonstrations, *, source: str, loss_before: float | None = None) -> dict[str, Any]:
        """`steps` supervised steps; `loss_before`: the demonstrations' loss already known (the
        previous chunk's `loss_after`: a loss is a forward over every demonstration, on office 1m
        ~45 s, a third of a 4-step chunk)."""
        traces = trained_traces(demos.traces())
        if not traces:
            raise HarnessError(f"warmup.source={source}: no demonstrations from train rows "
                               f"(left out: {demos.dropped or 'none'}); nothing to warm up on")
        self.train_dir.mkdir(parents=True, exist_ok=True)
        before = self.trainer.sft_loss(traces) if loss_before is None else loss_before
        rng, queue, lines = random.Random(self.seed), [], []
        for _ in range(self.config.steps):
            batch = []
            while len(batch) < min(self.config.batch_size, len(traces)):
                if not queue:
                    queue = list(range(len(traces)))
                    rng.shuffle(queue)
                batch.append(traces[queue.pop()])
            line = self.trainer.sft_step(batch, lr=self.config.lr).to_json()
            lines.append(line)
            with open(self.train_dir / STEPS_FILE, "a", encoding="utf-8") as handle:
                handle.write(json.dumps(line) + "\n")
            self.write(f"agentcore-rl warm-up step {len(lines)}/{self.config.steps}: loss {line['loss']:.3f}, "
                       f"{line['sequences']} sequences, {line['wall_time_s']:.1f}s")
        after = self.trainer.sft_loss(traces)
        summary = {
            "source": source, "steps": len(lines), "loss_before": before, "loss_after": after,
            "demonstrations": [{"task": d.task, "row_id": d.row_id} for d in demos.items],
            "dropped": demos.dropped, "trained_tokens": sum(sum(t.loss_mask) for t in traces),
        }
        (self.train_dir / WARMUP_FILE).write_text(json.dumps(summary, indent=2) + "\n")
        self.write(f"agentcore-rl warm-up: {len(lines)} supervised steps on {len(traces)} demonstrations "
                   f"from train rows, loss {before:.3f} -> {after:.3f}")
        return summary


def collect(run: WarmUpRun, specs: Sequence[TaskSpec], *, limit: int | None = None) -> Demonstrations:
    """The run's demonstrations from `warmup.source`, train rows only; at most `limit` (default
    `warmup.max_demonstrations`)."""
    config = run.config
    limit = config.warmup.max_demonstrations if limit is None else limit
    source = config.warmup.source
    guard = RowGuard(specs, config.eval.split)
    kind, _, where = source.partition(":")
    if kind == "oracle":
        cases = oracle_cases(specs, guard)
        if limit is not None and len(cases) > limit:  # run only the episodes that will be used
            cases = [cases[i] for i in sorted(random.Random(config.seed).sample(range(len(cases)), limit))]
        run.write(f"agentcore-rl warm-up: {len(cases)} teacher-forced oracle episodes on train rows")
        demos, dropped = from_rollouts(run.roll_out(cases))
    elif kind == "run":
        demos, dropped = from_run(Path(where).expanduser().resolve())
    else:
        default = specs[0].name if len(specs) == 1 else None
        demos, dropped = from_dataset(Path(where).expanduser().resolve(), run.renderer, default)
    return cap(guard.keep(demos, dropped), limit, config.seed)


def warm_up(run: WarmUpRun, specs: Sequence[TaskSpec]) -> dict[str, Any]:
    """Collect demonstrations and run the supervised steps on the run's trainer."""
    config = run.config
    warm = WarmUp(config.warmup, trainer=run.trainer(), trainer_kind=config.trainer.trainer.kind,
                  train_dir=run.run_dir / "train", write=run.write, seed=config.seed)
    return warm.run(collect(run, specs), source=config.warmup.source)
