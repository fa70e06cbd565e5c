"""Declaring tasks and rewards like test cases: `@task`, `@reward`, dataset loading, payloads.

A task is a test function whose cases are dataset rows x samples. The decorator only attaches a
`TaskSpec`; the pytest plugin expands it into items, the runner rolls each item out.
"""

from __future__ import annotations

import copy
import functools
import inspect
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .errors import DatasetError
from .mcp_servers import McpServer, check_unique
from .records import TaskLimits

TASK_ATTR = "__agentcore_rl_task__"
AGENT_REWARD = "agent"  # rewards[...] name of the reward the agent reported itself
SPLITS = ("train", "test")


@dataclass(frozen=True)
class RewardFn:
    """A named, weighted reward `(rollout, row) -> float`; may be `async def`."""

    fn: Callable[..., Any]
    weight: float = 1.0
    name: str = ""

    def __call__(self, rollout: Any, row: dict[str, Any]) -> Any:
        return self.fn(rollout, row)

    @property
    def is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.fn)


def reward(fn: Callable[..., Any] | None = None, *, weight: float = 1.0, name: str | None = None):
    """Declare a reward function; usable bare (`@reward`) or with arguments (`@reward(weight=2)`)."""

    def wrap(function: Callable[..., Any]) -> RewardFn:
        if not callable(function):
            raise TypeError(f"@reward expects a function, got {function!r}")
        return RewardFn(fn=function, weight=float(weight), name=name or function.__name__)

    return wrap(fn) if fn is not None else wrap


@dataclass(frozen=True)
class TaskSpec:
    name: str
    dataset: str
    agent: str | None
    samples: int
    rewards: tuple[RewardFn, ...]
    payload: Callable[[dict[str, Any]], dict[str, Any]] | None
    splits: dict[str, str] | None
    tags: tuple[str, ...]
    base_dir: Path
    fn: Callable[..., Any] = field(repr=False, compare=False)
    reward_from_agent: bool = False
    oracle: str | Callable[[dict[str, Any]], dict[str, Any]] | None = field(default=None, compare=False)
    sandbox: bool = False  # keep each session's final files for the `sandbox` fixture
    limits: TaskLimits = TaskLimits()  # per-episode limits on top of the run's (`@task(limits=...)`)
    mcp_servers: tuple[McpServer, ...] = ()  # MCP tool servers started per session
    environment: str | None = None  # its sessions' root filesystem (environments/), task-relative

    @functools.cached_property
    def needs_sandbox(self) -> bool:
        """Asked for with `sandbox=True`, or by a test body that takes the `sandbox` fixture."""
        return self.sandbox or "sandbox" in inspect.signature(self.fn).parameters

    def agent_path(self) -> str | None:
        """The agent as the local runtime needs it: a file path made absolute, or `module:app`."""
        if self.agent is None:
            return None
        if self.agent.endswith(".py"):
            return str((self.base_dir / self.agent).resolve())
        return self.agent

    def environment_path(self) -> str | None:
        """The environment's spec file (or rootfs) as an absolute path, or None."""
        return None if self.environment is None else str((self.base_dir / self.environment).resolve())


def task(
    *,
    dataset: str,
    agent: str | None = None,
    samples: int = 1,
    rewards: Sequence[RewardFn | Callable[..., Any]] = (),
    payload: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    splits: dict[str, str] | None = None,
    tags: Sequence[str] = (),
    name: str | None = None,
    reward_from_agent: bool = False,
    oracle: str | Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    sandbox: bool = False,
    limits: TaskLimits | dict[str, Any] | None = None,
    mcp_servers: Sequence[McpServer] = (),
    environment: str | None = None,
):
    """Declare a task test: one case per dataset row x sample, `samples` cases form a group.

    `reward_from_agent=True`: the rollout's reward is the one the agent reported in its result
    (`reward`, else `rewards`), instead of reward functions.
    `oracle`: the row's reference solution, as the result the oracle agent submits under
    `--agentcore-rl-set agent=oracle`: a row field name (`"answer"` gives the result
    `{"answer": row["answer"]}`) or a callable row -> result dict.
    `sandbox=True`: keep each session's final files, opened again as the `sandbox` fixture (on
    by itself when the test body takes `sandbox`).
    `limits`: per-episode limits on top of the run-wide ones, e.g. `{"max_turns": 8, "max_tokens":
    2000, "max_tool_calls": 5, "timeout_s": 60}`; an episode that runs into one is `limit_exceeded`.
    `mcp_servers`: MCP tool servers started per session (`arl.McpServer`, `mcp_servers.py`).
    `environment`: a root filesystem the task's local sessions run in, read-only as their `/`:
    an environment spec file (YAML: Debian packages, pip packages), a rootfs directory or a
    tarball, relative to the task file (see docs/environments.md; built once with
    `agentcore-rl env build PATH`).
    """
    task_limits = TaskLimits.parse(limits, where="@task(limits=...)")
    if not isinstance(samples, int) or samples < 1:
        raise ValueError(f"@task(samples={samples!r}): samples must be an integer >= 1")
    if oracle is not None and not (callable(oracle) or (isinstance(oracle, str) and oracle)):
        raise ValueError(
            f"@task(oracle={oracle!r}): give a row field name (oracle=\"answer\") or a callable "
            "row -> result dict (oracle=lambda row: {\"answer\": row[\"answer\"]})"
        )
    reward_fns = tuple(r if isinstance(r, RewardFn) else reward(r) for r in rewards)
    if reward_from_agent and reward_fns:
        raise ValueError(
            "@task(reward_from_agent=True, rewards=[...]): choose one source of the reward; the "
            "agent's reward is still recorded (as rewards['agent']) when the task computes its own"
        )
    reserved = [r.name for r in reward_fns if r.name == AGENT_REWARD or r.name.startswith(AGENT_REWARD + ".")]
    if reserved:
        raise ValueError(
            f"reward name {reserved[0]!r} is reserved for the agent's own reward; rename it "
            "(@arl.reward(name=...))"
        )

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        base_dir = Path(inspect.getfile(fn)).resolve().parent
        spec = TaskSpec(
            name=name or fn.__name__,
            dataset=dataset,
            agent=agent,
            samples=samples,
            rewards=reward_fns,
            payload=payload,
            splits=dict(splits) if splits else None,
            tags=tuple(tags),
            base_dir=base_dir,
            fn=fn,
            reward_from_agent=bool(reward_from_agent),
            oracle=oracle,
            sandbox=bool(sandbox),
            limits=task_limits,
            environment=environment,
        )
        check_unique(tuple(mcp_servers), task=spec.name)
        spec = replace(spec, mcp_servers=tuple(server.in_task(base_dir) for server in mcp_servers))
        setattr(fn, TASK_ATTR, spec)
        return fn

    return wrap


def task_spec(obj: Any) -> TaskSpec | None:
    return getattr(obj, TASK_ATTR, None)


def load_rows(spec: TaskSpec, split: str) -> list[dict[str, Any]]:
    """Rows of `split` ("train" / "test"), each with a string `id` and its `split`."""
    if split not in SPLITS:
        raise DatasetError(f"unknown split {split!r}; valid splits: {list(SPLITS)}")
    source = spec.dataset
    if source.startswith("hf:"):
        rows = _load_hf(spec, source[3:], split)
    else:
        rows = _load_file(spec, source, split)
    seen: set[str] = set()
    for row in rows:
        if row["id"] in seen:
            raise DatasetError(
                f"task {spec.name}: duplicate row id {row['id']!r} in {source}; ids must be unique"
            )
        seen.add(row["id"])
    return rows


def write_level_files(rows: Sequence[dict[str, Any]], levels: Iterable[Any],
                      path_for: Callable[[Any], Path]) -> list[Path]:
    """A pack generator's output: each level's rows, in order, to `path_for(level)`, one JSON
    object a line in the order the generator built it (a script's tool-call arguments stay in the
    tool's own order, which demonstrations teach), so a seeded generator rewrites its files byte
    for byte."""
    paths = []
    for level in levels:
        path = path_for(level)
        with path.open("w", encoding="utf-8") as out:
            for row in rows:
                if row["level"] == level:
                    out.write(json.dumps(row) + "\n")
        paths.append(path)
    return paths


def _load_file(spec: TaskSpec, source: str, split: str) -> list[dict[str, Any]]:
    path = (spec.base_dir / source).resolve()
    if not path.is_file():
        raise DatasetError(f"task {spec.name}: dataset file {path} does not exist")
    builders = {".jsonl": "json", ".json": "json", ".csv": "csv", ".parquet": "parquet"}
    builder = builders.get(path.suffix)
    if builder is None:
        raise DatasetError(
            f"task {spec.name}: unsupported dataset format {path.suffix!r}; use one of "
            f"{sorted(builders)} or hf:<name>"
        )
    from datasets import load_dataset

    if not path.read_bytes().strip():
        raise _no_rows(spec, path)
    try:
        data = load_dataset(builder, data_files=str(path), split="train")
    except Exception as exc:  # datasets raises many types; translate at the seam
        if "corresponds to no data" in str(exc):  # a CSV with a header only
            raise _no_rows(spec, path) from exc
        raise DatasetError(
            f"task {spec.name}: cannot load {path}: {type(exc).__name__}: {exc}"
        ) from exc
    if len(data) == 0:
        raise _no_rows(spec, path)
    all_rows = [_with_id(dict(row), index) for index, row in enumerate(data)]
    if spec.splits:
        wanted = spec.splits.get(split, split)
        return [row for row in all_rows if row.get("split") == wanted]
    if all_rows and all("split" not in row for row in all_rows):
        raise DatasetError(
            f"task {spec.name}: rows in {path} have no `split` field; add "
            '"split": "train"|"test" to each row or pass @task(splits=...)'
        )
    return [row for row in all_rows if row.get("split") == split]


def _no_rows(spec: TaskSpec, path: Path) -> DatasetError:
    return DatasetError(
        f"task {spec.name}: dataset file {path} has no rows; add one row per case (JSONL: one "
        'JSON object per line, e.g. {"id": "q1", "split": "test", ...}) or point '
        "@task(dataset=...) at a file that has them"
    )


def _load_hf(spec: TaskSpec, name: str, split: str) -> list[dict[str, Any]]:
    from datasets import load_dataset

    dataset_name, _, config = name.partition(":")
    hf_split = (spec.splits or {}).get(split, split)
    try:
        data = load_dataset(dataset_name, config or None, split=hf_split)
    except Exception as exc:
        raise DatasetError(
            f"task {spec.name}: cannot load hf:{name} split {hf_split!r}: {exc}"
        ) from exc
    return [{**_with_id(dict(row), index), "split": split} for index, row in enumerate(data)]


def _with_id(row: dict[str, Any], index: int) -> dict[str, Any]:
    row_id = row.get("id")
    row["id"] = f"row-{index}" if row_id is None else str(row_id)
    return row


def rollout_block(*, base_url: str, model_id: str, session_id: str, sampling: Any) -> dict:
    """The reserved `_rollout` dict every invocation carries (ART's field names). Runtimes add
    `exp_id`, `input_id`, `s3_bucket` (+ `result_key`, `session_id`) in `result_mode=s3` only."""
    return {
        "base_url": base_url,
        "model_id": model_id,
        "api_key": session_id,
        "sampling_params": {
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "top_k": sampling.top_k,
            "max_tokens": sampling.max_tokens,
        },
    }


def build_payload(spec: TaskSpec, row: dict[str, Any], rollout_info: dict[str, Any]) -> dict:
    """The invoke payload: `payload(row)`, else row["payload"], else the row; plus `_rollout`."""
    if spec.payload is not None:
        body = spec.payload(copy.deepcopy(row))
    elif "payload" in row:
        body = copy.deepcopy(row["payload"])
    else:
        body = copy.deepcopy(row)
    if not isinstance(body, dict):
        raise DatasetError(
            f"task {spec.name}: payload for row {row.get('id')!r} must be a JSON object, "
            f"got {type(body).__name__}"
        )
    try:
        json.dumps(body)
    except (TypeError, ValueError) as exc:  # ValueError: a circular reference
        raise DatasetError(
            f"task {spec.name}: payload for row {row.get('id')!r} is not JSON-serialisable: {exc}"
        ) from exc
    if "_rollout" in body:
        raise DatasetError(
            f"task {spec.name}: payload for row {row.get('id')!r} already has the reserved key "
            "`_rollout`; rename it"
        )
    body["_rollout"] = rollout_info
    return body


def oracle_result(spec: TaskSpec, row: dict[str, Any]) -> dict[str, Any]:
    """The result the oracle agent submits for `row`: the task's reference solution."""
    if spec.oracle is None:
        raise DatasetError(missing_oracle_message(spec.name))
    if isinstance(spec.oracle, str):
        if spec.oracle not in row:
            raise DatasetError(
                f"task {spec.name}: oracle={spec.oracle!r} names a row field, but row "
                f"{row.get('id')!r} has none (its fields: {sorted(row)})"
            )
        result = {spec.oracle: copy.deepcopy(row[spec.oracle])}
    else:
        result = spec.oracle(copy.deepcopy(row))
    if not isinstance(result, dict):
        raise DatasetError(
            f"task {spec.name}: the oracle for row {row.get('id')!r} must return a dict (the "
            f"agent's result), got {type(result).__name__}"
        )
    try:
        json.dumps(result)
    except (TypeError, ValueError) as exc:
        raise DatasetError(
            f"task {spec.name}: the oracle result for row {row.get('id')!r} is not "
            f"JSON-serialisable: {exc}"
        ) from exc
    return result


def missing_oracle_message(task_name: str) -> str:
    return (
        f"task {task_name} declares no oracle, so agent=oracle cannot run it; declare where the "
        f"row's reference solution is: @arl.task(..., oracle=\"answer\") (a row field, submitted "
        "as {\"answer\": row[\"answer\"]}) or @arl.task(..., oracle=lambda row: {...}); or drop "
        "--agentcore-rl-set agent=oracle"
    )


def case_id(row_id: str, sample_index: int) -> str:
    prefix = f"row-{row_id}" if row_id.isdigit() else row_id
    return f"{prefix}-s{sample_index}"
