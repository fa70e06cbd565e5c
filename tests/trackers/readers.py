"""Read a tracker's output back with that tool's own reader, into plain dicts for comparison.

- W&B: the offline run file `run-<id>.wandb` is a LevelDB-style log of `wandb_internal_pb2.Record`
  protobufs (wandb's own schema); wandb 0.31 ships no Python scanner for it any more (its sync is
  in the Go core), so `wandb_records` walks the log framing and parses each record with wandb's
  protobuf classes.
- MLflow: `MlflowClient` on the file store.
- TensorBoard: `EventAccumulator`.
"""

from __future__ import annotations

import json
import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BLOCK = 32768
HEADER = struct.Struct("<4sHB")  # ":W&B", magic 0xBEE1, version
RECORD = struct.Struct("<IHB")  # crc32, length, type
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def _chunks(data: bytes):
    ident, magic, version = HEADER.unpack_from(data, 0)
    assert (ident, magic, version) == (b":W&B", 0xBEE1, 0), (ident, magic, version)
    offset = HEADER.size
    while offset < len(data):
        left = BLOCK - offset % BLOCK
        if left < RECORD.size:  # the rest of a block too short for a header is padding
            offset += left
            continue
        crc, length, kind = RECORD.unpack_from(data, offset)
        if length == 0 and kind == 0:
            offset += left
            continue
        payload = data[offset + RECORD.size: offset + RECORD.size + length]
        assert zlib.crc32(bytes([kind]) + payload) & 0xFFFFFFFF == crc, f"bad crc at {offset}"
        yield kind, payload
        offset += RECORD.size + length


def wandb_records(path: Path) -> list[Any]:
    from wandb.proto import wandb_internal_pb2

    records, pending = [], b""
    for kind, payload in _chunks(Path(path).read_bytes()):
        if kind == FULL:
            whole = payload
        elif kind == FIRST:
            pending = payload
            continue
        elif kind == MIDDLE:
            pending += payload
            continue
        else:
            whole, pending = pending + payload, b""
        record = wandb_internal_pb2.Record()
        record.ParseFromString(whole)
        records.append(record)
    return records


@dataclass
class WandbRun:
    run_id: str = ""
    group: str = ""
    name: str = ""
    config: dict[str, Any] = field(default_factory=dict)
    history: dict[int, dict[str, Any]] = field(default_factory=dict)  # step -> metrics
    summary: dict[str, Any] = field(default_factory=dict)
    artifacts: dict[str, list[str]] = field(default_factory=dict)  # name -> file paths
    exit_code: int | None = None


def _key(item) -> str:
    return item.key or "/".join(item.nested_key)


def read_wandb_run(path: Path) -> WandbRun:
    run = WandbRun()
    for record in wandb_records(path):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            run.run_id, run.group, run.name = record.run.run_id, record.run.run_group, record.run.display_name
            run.config.update({_key(i): json.loads(i.value_json) for i in record.run.config.update})
        elif kind == "config":
            run.config.update({_key(i): json.loads(i.value_json) for i in record.config.update})
        elif kind == "history":
            items = {_key(i): json.loads(i.value_json) for i in record.history.item}
            step = record.history.step.num if record.history.HasField("step") else items.get("_step")
            run.history.setdefault(int(step), {}).update(items)
        elif kind == "summary":
            run.summary.update({_key(i): json.loads(i.value_json) for i in record.summary.update})
        elif kind == "artifact":
            run.artifacts[record.artifact.name] = [entry.path for entry in record.artifact.manifest.contents]
        elif kind == "exit":
            run.exit_code = record.exit.exit_code
    return run


def read_tensorboard(log_dir: Path) -> tuple[dict[str, dict[int, float]], dict[str, str]]:
    """Scalars (tag -> step -> value) and text summaries (tag -> text) of one log dir."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(log_dir), size_guidance={"scalars": 0, "tensors": 0})
    accumulator.Reload()
    scalars = {tag: {event.step: event.value for event in accumulator.Scalars(tag)}
               for tag in accumulator.Tags()["scalars"]}
    texts = {}
    for tag in accumulator.Tags()["tensors"]:
        event = accumulator.Tensors(tag)[-1]
        texts[tag] = event.tensor_proto.string_val[0].decode("utf-8")
    return scalars, texts
