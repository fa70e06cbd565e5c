"""`agentcore-rl export verl|slime --task NAME --out DIR`: a task's rows as an external trainer's data.

Each exported row carries what the rollout side needs to play it: the task reference
(`file.py::test_name`, absolute) and the row itself (JSON). The prompt column is informational
(verl's dataset requires chat messages; the agent builds its own prompts through the gateway).

- verl: `DIR/<split>.parquet` in the layout verl's `RLHFDataset` reads (`prompt` as chat
  messages, `data_source`, `ability`, `reward_model`, `extra_info` with `index`, `row_id`,
  `task`, `task_ref`, `row`, and `agent_name` = the agentcore_rl agent loop), plus
  `DIR/agent_loop.yaml` for `actor_rollout_ref.rollout.agent.agent_loop_config_path`.
- slime: `DIR/<split>.jsonl` with `prompt` (chat messages), `label` (row id) and `metadata`
  (`{"agentcore_rl": {task, task_ref, row_id, row}}`) for `--input-key prompt --label-key label
  --metadata-key metadata`.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import HarnessError
from ..tasks import SPLITS, TaskSpec, build_payload, load_rows
from ._tasks import find_task, task_ref

TARGETS = ("verl", "slime")


def prompt_messages(spec: TaskSpec, row: dict[str, Any]) -> list[dict[str, str]]:
    """Chat messages describing the row: its `prompt` (messages or text), else its payload as JSON."""
    prompt = row.get("prompt")
    if isinstance(prompt, list) and all(isinstance(m, dict) and "role" in m for m in prompt):
        return [{"role": str(m["role"]), "content": str(m.get("content", ""))} for m in prompt]
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    body = build_payload(spec, row, {})
    body.pop("_rollout", None)
    return [{"role": "user", "content": json.dumps(body, ensure_ascii=False, sort_keys=True)}]


def verl_records(spec: TaskSpec, rows: Sequence[dict[str, Any]], *, split: str) -> list[dict[str, Any]]:
    from .verl import AGENT_NAME

    reference = task_ref(spec)
    return [
        {
            "data_source": f"agentcore_rl/{spec.name}",
            "prompt": prompt_messages(spec, row),
            "ability": "agent",
            "reward_model": {"style": "agentcore_rl", "ground_truth": str(row["id"])},
            "extra_info": {
                "index": index, "split": split, "row_id": str(row["id"]), "task": spec.name,
                "task_ref": reference, "row": json.dumps(row, ensure_ascii=False, default=str),
            },
            "agent_name": AGENT_NAME,
        }
        for index, row in enumerate(rows)
    ]


def slime_records(spec: TaskSpec, rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    from .slime import META_KEY

    reference = task_ref(spec)
    return [
        {
            "prompt": prompt_messages(spec, row),
            "label": str(row["id"]),
            "metadata": {META_KEY: {"task": spec.name, "task_ref": reference, "row_id": str(row["id"]),
                                    "row": json.dumps(row, ensure_ascii=False, default=str)}},
        }
        for row in rows
    ]


def export(target: str, spec: TaskSpec, out_dir: Path, *, splits: Sequence[str],
           config: str | None = None) -> list[Path]:
    """Write the files for `target`; returns their paths (empty splits are skipped)."""
    if target not in TARGETS:
        raise HarnessError(f"export target {target!r} is not supported; valid choices: {list(TARGETS)}")
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for split in splits:
        rows = load_rows(spec, split)
        if not rows:
            continue
        if target == "verl":
            import datasets

            path = out_dir / f"{split}.parquet"
            datasets.Dataset.from_list(verl_records(spec, rows, split=split)).to_parquet(str(path))
        else:
            path = out_dir / f"{split}.jsonl"
            path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in slime_records(spec, rows)),
                            encoding="utf-8")
        written.append(path)
    if not written:
        raise HarnessError(f"task {spec.name} has no rows in split(s) {list(splits)}")
    if target == "verl":
        written.append(write_agent_loop_yaml(out_dir / "agent_loop.yaml", config=config))
    return written


def write_agent_loop_yaml(path: Path, *, config: str | None) -> Path:
    """The packaged agent-loop YAML with `config` set (an absolute path, or null)."""
    import yaml

    from .verl import AGENT_LOOP_YAML

    entries = yaml.safe_load(Path(AGENT_LOOP_YAML).read_text(encoding="utf-8"))
    entries[0]["config"] = str(Path(config).resolve()) if config else None
    path.write_text(yaml.safe_dump(entries, sort_keys=False), encoding="utf-8")
    return path


def verl_command(out_dir: Path) -> str:
    out = out_dir.resolve()
    return (
        "python -m verl.trainer.main_ppo algorithm.adv_estimator=grpo \\\n"
        f"  data.train_files={out}/train.parquet data.val_files={out}/test.parquet \\\n"
        "  data.return_raw_chat=True data.filter_overlong_prompts=False \\\n"
        "  actor_rollout_ref.rollout.mode=async actor_rollout_ref.rollout.calculate_log_probs=True \\\n"
        "  actor_rollout_ref.rollout.agent.default_agent_loop=agentcore_rl \\\n"
        f"  actor_rollout_ref.rollout.agent.agent_loop_config_path={out}/agent_loop.yaml \\\n"
        "  actor_rollout_ref.model.path=<HF model> actor_rollout_ref.rollout.n=<group size> ..."
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agentcore-rl export",
        description="write a task's dataset in the layout verl or slime reads",
    )
    parser.add_argument("target", choices=TARGETS)
    parser.add_argument("--task", required=True,
                        help="task name (searched in test files under --root) or file.py::test_name")
    parser.add_argument("--out", required=True, type=Path, help="output directory")
    parser.add_argument("--split", action="append", choices=SPLITS, default=None,
                        help="split(s) to export (repeatable; default: train and test)")
    parser.add_argument("--root", type=Path, default=Path.cwd(),
                        help="where to look for test files (default: the current directory)")
    parser.add_argument("--config", default=None,
                        help="verl: the harness config (configs/ dir or YAML) the agent loop composes")
    return parser


def main(argv: Sequence[str]) -> int:
    args = _parser().parse_args(list(argv))
    try:
        spec = find_task(args.task, root=args.root.resolve())
        paths = export(args.target, spec, args.out, splits=args.split or list(SPLITS), config=args.config)
    except HarnessError as exc:
        print(f"agentcore-rl export: error: {exc}", file=sys.stderr)
        return 2
    for path in paths:
        print(f"wrote {path}")
    if args.target == "verl":
        print(verl_command(args.out))
    return 0
