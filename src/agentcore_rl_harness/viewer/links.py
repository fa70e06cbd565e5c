"""Where the viewer listens by default and how a rollout's page is addressed (report.html links
to it), with nothing heavy imported: the reports import this module."""

from __future__ import annotations

import re
from urllib.parse import quote

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 7576


def run_key(name: str) -> str:
    """A run's key in viewer URLs: its directory's name, with anything unusual made `-`."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip(".-") or "run"


def rollout_link(run_name: str, session_id: str) -> str:
    """The page of the rollout with `session_id`, when `agentcore-rl view` runs with defaults."""
    return (f"http://{DEFAULT_HOST}:{DEFAULT_PORT}/run/{quote(run_key(run_name))}/session/"
            f"{quote(session_id, safe='')}")
