"""Final sandbox states in the run directory, so `agentcore-rl rescore` can score again later.

A task that inspects its session's files (`sandbox`) gets each session's final files kept by the
runtime (gzip tar, at most `runtime.final_state_mb`). With `runtime.keep_final_state` (default
true) they are also written to `states/<session_id>.tar.gz` once the rollout is scored, or, when
the runtime could not keep them, why not to `states/<session_id>.missing`. The run directory is
hidden from agent sessions; the files are what the agent left in its own sandbox.
"""

from __future__ import annotations

import os
from pathlib import Path

STATES_DIR = "states"


def _path(run_dir: Path, session_id: str, suffix: str) -> Path:
    if not session_id or "/" in session_id or session_id.startswith("."):
        raise ValueError(f"not a session id: {session_id!r}")
    return Path(run_dir) / STATES_DIR / f"{session_id}{suffix}"


def save(run_dir: Path, session_id: str, state: bytes | None, why_missing: str | None) -> Path:
    """Write the state (or why there is none) beside the rollouts; owner-only permissions."""
    directory = Path(run_dir) / STATES_DIR
    directory.mkdir(mode=0o700, exist_ok=True)
    path = _path(run_dir, session_id, ".tar.gz" if state is not None else ".missing")
    data = state if state is not None else (why_missing or "the session ended before it started").encode()
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "wb") as handle:
        handle.write(data)
    return path


def load(run_dir: Path, session_id: str) -> tuple[bytes | None, str | None]:
    """(the state, None), or (None, why it is not there)."""
    kept = _path(run_dir, session_id, ".tar.gz")
    if kept.is_file():
        return kept.read_bytes(), None
    missing = _path(run_dir, session_id, ".missing")
    if missing.is_file():
        return None, missing.read_text(errors="replace")
    return None, (f"the run directory has no {STATES_DIR}/{session_id}.tar.gz (runs made before "
                  "final states were saved, or with runtime.keep_final_state=false)")
