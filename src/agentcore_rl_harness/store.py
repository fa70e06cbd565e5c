"""The run directory: resolved config, append-only rollouts.jsonl, and reading it back."""

from __future__ import annotations

import json
import logging
import math
import numbers
import os
import threading
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import yaml

from .errors import HarnessError
from .records import Rollout, Status

log = logging.getLogger(__name__)
ROLLOUTS = "rollouts.jsonl"
DISCARDED = "rollouts.discarded.jsonl"
RUN_INFO = "run.json"
INFLIGHT = "inflight.json"  # the rollouts running now (run/inflight.py writes it, the viewer reads it)


def default_run_dir(mode: str, base: Path) -> Path:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")
    return base / "outputs" / f"{stamp}-{mode}"


class RunStore:
    """One run directory. `append` is thread-safe and flushes each record before returning."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = Path(run_dir).resolve()
        self._lock = threading.Lock()
        self.write_errors: list[str] = []
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise HarnessError(f"cannot create run directory {self.run_dir}: {exc}") from exc
        _drop_torn_tail(self.run_dir / ROLLOUTS)
        self._file = open(self.run_dir / ROLLOUTS, "a", encoding="utf-8")

    def write_config(self, resolved: dict[str, Any]) -> None:
        text = yaml.safe_dump(resolved, sort_keys=False)
        (self.run_dir / "config.yaml").write_text(text, encoding="utf-8")

    def write_run_info(self, info: dict[str, Any]) -> None:
        (self.run_dir / RUN_INFO).write_text(json.dumps(info, indent=2), encoding="utf-8")

    def read_run_info(self) -> dict[str, Any]:
        path = self.run_dir / RUN_INFO
        if not path.is_file():
            raise HarnessError(f"{path} is missing: {self.run_dir} is not a resumable run directory")
        return json.loads(path.read_text(encoding="utf-8"))

    def rewrite(self, keep: list[Rollout], discard: list[Rollout]) -> None:
        """Replace rollouts.jsonl by `keep`; `discard` goes to rollouts.discarded.jsonl."""
        with self._lock:
            self._file.close()
            if discard:
                with open(self.run_dir / DISCARDED, "a", encoding="utf-8") as handle:
                    for rollout in discard:
                        handle.write(json.dumps(rollout.to_json(), ensure_ascii=False) + "\n")
            temporary = self.run_dir / (ROLLOUTS + ".tmp")
            with open(temporary, "w", encoding="utf-8") as handle:
                for rollout in keep:
                    handle.write(json.dumps(rollout.to_json(), ensure_ascii=False) + "\n")
            os.replace(temporary, self.run_dir / ROLLOUTS)
            self._file = open(self.run_dir / ROLLOUTS, "a", encoding="utf-8")

    def append(self, rollout: Rollout) -> Rollout:
        """Write one record and flush it; return the rollout as written.

        Never raises for what the record holds (it runs inside pytest hooks): a value strict JSON
        cannot hold (NaN, inf, an object, a lone surrogate) is written in a safe form and the
        rollout is marked `task_failed` with a message naming the field. A failed write (disk
        full) is kept in `write_errors` for the caller to report; the rollout stays in memory.
        """
        rollout, line = encode_rollout(rollout)
        with self._lock:
            try:
                self._file.write(line + "\n")
                self._file.flush()
            except OSError as exc:
                self.write_errors.append(f"{rollout.task}/{rollout.row_id}: {exc}")
                log.error("cannot write rollout %s/%s to %s: %s", rollout.task, rollout.row_id,
                          self.run_dir / ROLLOUTS, exc)
        return rollout

    def close(self) -> None:
        with self._lock:
            self._file.close()


class Outbox:
    """A worker process's store under `pytest -n` (sharding.py): it writes nothing; each record's
    JSON line waits to be sent to the controller, the run's one writer."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lines: list[str] = []
        self.write_errors: list[str] = []

    def append(self, rollout: Rollout) -> Rollout:
        """Encode one record as `RunStore.append` writes it; return the rollout as encoded."""
        rollout, line = encode_rollout(rollout)
        with self._lock:
            self._lines.append(line)
        return rollout

    def drain(self) -> list[str]:
        """The lines appended since the last drain."""
        with self._lock:
            lines, self._lines = self._lines, []
        return lines

    def close(self) -> None:
        pass


def write_parquet(run_dir: Path, rollouts: list[Rollout]) -> Path | None:
    """`rollouts.parquet` (a HF `datasets` dataset) of the rollouts `collect` gathered.

    Parquet columns need one type across rows, but an agent's `result`, the `rewards` by name
    and a trace's `metadata` may be any JSON, differently shaped per rollout (or empty, which
    parquet cannot store as a struct): those are stored as JSON text (`json.loads` them); every
    other column is as in rollouts.jsonl.
    """
    from datasets import Dataset

    records = []
    for rollout in rollouts:
        data = json.loads(encode_rollout(rollout)[1])
        data["result"] = json.dumps(data["result"], ensure_ascii=False)
        data["rewards"] = json.dumps(data["rewards"], ensure_ascii=False)
        for trace in data["traces"]:
            trace["metadata"] = json.dumps(trace["metadata"], ensure_ascii=False)
        records.append(data)
    if not records:
        return None
    path = Path(run_dir) / "rollouts.parquet"
    Dataset.from_list(records).to_parquet(str(path))
    return path


def encode_rollout(rollout: Rollout) -> tuple[Rollout, str]:
    """The record's JSON line. Values strict JSON cannot hold become strings (non-finite numbers
    in `reward`/`rewards` are dropped) and the rollout is failed, naming each one."""
    try:
        line = json.dumps(rollout.to_json(), ensure_ascii=False, allow_nan=False)
        line.encode("utf-8")
        return rollout, line
    except (TypeError, ValueError):
        pass  # some value cannot be stored as it is: find and replace each one below
    problems: list[str] = []
    reward = rollout.reward
    if reward is not None and not _finite_number(reward):
        problems.append(f"reward = {reward!r}")
        reward = None
    rewards = {}
    for name, value in rollout.rewards.items():
        if _finite_number(value):
            rewards[str(name)] = value
        else:
            problems.append(f"rewards[{name!r}] = {value!r}")
    data = rollout.replace(reward=reward, rewards=rewards).to_json()
    data = json_safe(data, "", problems)
    if not problems:  # only numbers of other types (numpy), now plain floats and ints
        return Rollout.from_json(data), json.dumps(data, ensure_ascii=False, allow_nan=False)
    status = Status(data["status"])
    if status is Status.COMPLETED:
        status = Status.TASK_FAILED
    note = (
        "the record held values strict JSON cannot store: " + "; ".join(problems)
        + " (rewards must be finite numbers; other values are stored as their text)"
    )
    error = f"{data['error']}; {note}" if data.get("error") else note
    data.update(status=status.value, error=error, success=False if status is Status.TASK_FAILED
                else data["success"])
    return Rollout.from_json(data), json.dumps(data, ensure_ascii=False, allow_nan=False)


def _finite_number(value: object) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def json_safe(value: object, path: str, problems: list[str]) -> object:
    """`value` with everything strict JSON cannot hold replaced by its text; each is named."""
    if value is None or isinstance(value, (bool, int)):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        if math.isfinite(value):
            return float(value)
        problems.append(f"{path or 'value'} = {float(value)!r}")
        return repr(float(value))
    if isinstance(value, str):
        try:
            value.encode("utf-8")
            return value
        except UnicodeEncodeError:
            problems.append(f"{path or 'value'} has a lone surrogate")
            return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, dict):
        return {
            str(json_safe(key, f"{path}[{key!r}]", problems)):
                json_safe(item, f"{path}.{key}" if path else str(key), problems)
            for key, item in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [json_safe(item, f"{path}[{index}]", problems) for index, item in enumerate(value)]
    problems.append(f"{path or 'value'} is a {type(value).__name__} object")
    return repr(value)


def _drop_torn_tail(path: Path) -> None:
    """Cut an unterminated last line (a write a kill cut off), so appends start a fresh line."""
    if not path.is_file():
        return
    with open(path, "rb+") as handle:
        size = handle.seek(0, os.SEEK_END)
        if size == 0:
            return
        handle.seek(size - 1)
        if handle.read(1) == b"\n":
            return
        data = handle.seek(0) or handle.read()
        handle.truncate(data.rfind(b"\n") + 1)


def read_json_lines(path: Path) -> list[Any]:
    """The records of an append-only JSON-lines file that may be written right now or was cut
    short by a kill: lines that do not parse are skipped; no file, no records."""
    if not path.is_file():
        return []
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            records.append(json.loads(line))
        except ValueError:
            continue
    return records


def read_rollouts(run_dir: Path) -> list[Rollout]:
    """All complete records; a torn last line (a killed run) is ignored, corrupt lines raise."""
    path = Path(run_dir) / ROLLOUTS
    if not path.is_file():
        raise HarnessError(f"{path} does not exist; is {run_dir} a run directory?")
    lines = path.read_text(encoding="utf-8").split("\n")
    rollouts = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            rollouts.append(Rollout.from_json(json.loads(line)))
        except (ValueError, KeyError) as exc:
            if number == len(lines):  # an unterminated final line: the write was cut off
                break
            raise HarnessError(f"{path}:{number}: not a rollout record: {exc}") from exc
    return rollouts
