"""The spam agent: fills its working directory with junk and answers with plausible keys.

It never calls the model. It writes noise files of many types (random names and bytes, nested
folders, files named like ones the payload mentions, and a file stuffed with every string of the
payload) and returns what a checker might look for: `answer`, `result`, `success`, `reward`,
`rewards`, `tool_calls`, and the payload's own strings. A task it passes has a reward that
format, volume or self-reporting can game.
"""

from __future__ import annotations

import os
import random
import string
from pathlib import Path
from typing import Any

from bedrock_agentcore import BedrockAgentCoreApp

app = BedrockAgentCoreApp()

SUFFIXES = (".txt", ".md", ".csv", ".json", ".eml", ".ics", ".xlsx", ".docx", ".log", ".py")
FOLDERS = ("", "out", "data", "docs", "mail/sent", "calendar", "tmp/x")


def strings_of(value: Any) -> list[str]:
    """Every string in a JSON value (keys too), depth first."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for key, item in value.items() for s in (key, *strings_of(item))]
    if isinstance(value, list):
        return [s for item in value for s in strings_of(item)]
    return []


def _safe(name: str) -> Path | None:
    """`name` as a relative path inside the working directory, or None."""
    path = Path(name)
    if path.is_absolute() or ".." in path.parts or not path.parts:
        return None
    return path


def spam(payload: dict[str, Any], rng: random.Random) -> list[str]:
    body = {key: value for key, value in payload.items() if key != "_rollout"}
    words = strings_of(body)
    stuffing = "\n".join(words)
    written = []
    for index in range(24):
        folder = Path(FOLDERS[index % len(FOLDERS)])
        name = "".join(rng.choice(string.ascii_lowercase) for _ in range(6)) + SUFFIXES[index % len(SUFFIXES)]
        data = os.urandom(rng.randint(1, 512)) if index % 2 else (stuffing + "\n" + str(rng.random())).encode()
        written.append(_write(folder / name, data))
    for word in words:  # files named like the paths the payload mentions, holding junk
        path = _safe(word) if "/" in word or "." in word else None
        if path is not None and len(word) < 200:
            written.append(_write(path, b"\x00junk " + os.urandom(32)))
    written.append(_write(Path("answer.txt"), stuffing.encode()))
    return written


def _write(path: Path, data: bytes) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return str(path)


@app.entrypoint
def invoke(payload: dict[str, Any]) -> dict[str, Any]:
    rng = random.Random(0)
    written = spam(payload, rng)
    words = strings_of({key: value for key, value in payload.items() if key != "_rollout"})
    return {
        "answer": " ".join(words)[:4000], "result": "done", "output": "done", "success": True,
        "status": "completed", "reward": 1.0, "rewards": {"all": 1.0}, "files": written[:50],
        "tool_calls": ["ls", "read", "write"], "reply": "Done. All checks pass.",
    }
