"""The run directory of one run: its composed config, made on the first rollout, and resume.

`RunDir.create` composes the config and picks the directory but writes nothing (`--collect-only`
and sessions where no rollout runs leave no trace); `open()` makes it with config.yaml, run.json
and rollouts.jsonl. `RunDir.resume` reopens a stopped run: its config.yaml (plus new overrides),
its finished rollouts, and `reload()` says what is kept and where training continues. `RunDir.attach` is a worker
process's view of a directory another process owns (`pytest -n`, sharding.py): it reads, and its
store holds records for the owner to write.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config import ComposedConfig, compose_config, composed_from, default_config_source
from ..errors import HarnessError
from ..records import Rollout, Status
from ..samplers.hosted import check_mode
from ..store import Outbox, RunStore, default_run_dir, read_rollouts
from ..train_store import latest_checkpoint, read_steps, rewrite_steps


@dataclass(frozen=True)
class Reloaded:
    """What a resumed run keeps: its rollouts and step lines, and where training continues."""

    rollouts: list[Rollout]
    train_steps: list[dict[str, Any]]
    start_step: int  # training steps done: the next one is start_step + 1
    checkpoint: Path | None  # the trainer loads it (train / run modes)

    def line(self) -> str:
        after = f" after checkpoint {self.checkpoint.name}" if self.checkpoint is not None else ""
        return (f"agentcore-rl resume: {len(self.rollouts)} rollouts kept, training continues at step "
                f"{self.start_step + 1}{after}")


@dataclass
class RunDir:
    path: Path
    mode: str
    config: ComposedConfig
    resumed: list[Rollout] | None = None  # a resumed run's rollouts as found
    shared: bool = False  # attached: another process owns the directory and writes its files
    _store: RunStore | Outbox | None = field(default=None, repr=False)

    @classmethod
    def create(cls, *, mode: str, overrides: list[str], config_path: Path | None,
               out_dir: Path | None, rootdir: Path) -> "RunDir":
        """Compose the config (`config_path`, else the project's configs/, else the packaged
        defaults); the directory is `out_dir`, else outputs/<UTC timestamp>-<mode>."""
        source = config_path if config_path is not None else default_config_source(rootdir)
        composed = compose_config(overrides, source=source)
        check_mode(composed.typed.sampler.kind, mode)
        path = out_dir if out_dir is not None else default_run_dir(mode, rootdir)
        return cls(path=Path(path).resolve(), mode=mode, config=composed)

    @classmethod
    def resume(cls, *, mode: str, run_dir: Path, overrides: list[str]) -> "RunDir":
        """Reopen a stopped run: its config.yaml, its finished rollouts, its checkpoints."""
        run_dir = Path(run_dir).resolve()
        if not (run_dir / "config.yaml").is_file():
            raise HarnessError(f"--agentcore-rl-resume {run_dir}: no config.yaml, not a run directory")
        store = RunStore(run_dir)
        info = store.read_run_info()
        recorded_mode = info["mode"]
        if recorded_mode != mode:
            raise HarnessError(
                f"--agentcore-rl-resume {run_dir}: that is a {recorded_mode!r} run; resume it with "
                f"--agentcore-rl {recorded_mode}"
            )
        # config.yaml already holds the original overrides; only new ones are applied on top.
        original = list(info.get("overrides", []))
        extra = [o for o in overrides if o not in original]
        composed = compose_config(extra, source=run_dir / "config.yaml")
        check_mode(composed.typed.sampler.kind, mode)
        # The report names every override the run was made with, as an uninterrupted run would.
        composed = dataclasses.replace(composed, overrides=(*original, *extra))
        if extra:
            store.write_run_info({**info, "overrides": [*original, *extra]})
        return cls(path=run_dir, mode=mode, config=composed, resumed=read_rollouts(run_dir), _store=store)

    @classmethod
    def attach(cls, *, mode: str, run_dir: Path, resolved: dict[str, Any], overrides: list[str],
               resumed: bool) -> "RunDir":
        """A worker's view of the run directory its controller owns: the controller's composed
        config; a resumed run's rollouts as the controller kept them; records go to an `Outbox`."""
        run_dir = Path(run_dir).resolve()
        composed = composed_from(resolved, overrides=overrides, source=str(run_dir / "config.yaml"))
        return cls(path=run_dir, mode=mode, config=composed, shared=True, _store=Outbox(),
                   resumed=read_rollouts(run_dir) if resumed else None)

    def reconfigure(self, config: ComposedConfig) -> None:
        """The config with choices made before the directory opens (recipe=auto's start-up)."""
        if self.opened:
            raise HarnessError(f"the config of {self.path} cannot change: its config.yaml is written")
        self.config = config

    @property
    def opened(self) -> bool:
        return self._store is not None

    @property
    def store(self) -> RunStore | Outbox:
        return self._store if self._store is not None else self.open()

    def open(self) -> RunStore | Outbox:
        """Create the run directory (config.yaml, run.json, rollouts.jsonl) if not yet done."""
        if self._store is None:
            store = RunStore(self.path)
            store.write_config(self.config.resolved)
            store.write_run_info({"mode": self.mode, "overrides": list(self.config.overrides)})
            self._store = store
        return self._store

    def reload(self) -> Reloaded:
        """Keep a resumed run's finished rollouts; steps from the newest checkpoint on are redone
        (their train rollouts and step lines are set aside), infra errors are retried."""
        assert self.resumed is not None, "reload() is for a resumed run"
        checkpoint = latest_checkpoint(self.path)
        start_step = checkpoint[0] if checkpoint else 0  # steps done (steps count from 1)
        trained = self._async_trained(start_step)

        def stale(rollout: Rollout) -> bool:
            if rollout.status is Status.INFRA_ERROR:
                return True
            if rollout.phase == "train" and trained is not None:  # async: by the steps' own lists
                return rollout.group_id not in trained
            return rollout.phase == "train" and (rollout.step or 0) > start_step

        keep = [r for r in self.resumed if not stale(r)]
        if not self.shared:  # the owner rewrote the files before the workers started
            self.store.rewrite(keep, [r for r in self.resumed if stale(r)])
            rewrite_steps(self.path, done=start_step)
        return Reloaded(rollouts=keep, train_steps=read_steps(self.path), start_step=start_step,
                        checkpoint=checkpoint[1] if checkpoint else None)

    def _async_trained(self, start_step: int) -> set[str] | None:
        """Under trainer.mode=async, the groups the kept steps (up to step `start_step`) trained; a
        train rollout of any other group was never in the checkpoint's weights and is set aside."""
        section = self.config.typed.trainer
        if section is None or section.loop.mode != "async":
            return None
        from .staleness import trained_groups

        return trained_groups([line for line in read_steps(self.path) if line["step"] <= start_step])

    def close(self) -> list[str]:
        """Close rollouts.jsonl; return the writes that failed (each an infrastructure error)."""
        if self._store is None:
            return []
        self._store.close()
        return list(self._store.write_errors)
