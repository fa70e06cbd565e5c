"""What a judge is asked, and the strict reading of its answer.

Pointwise, the judge answers one JSON object `{"score": <0..1>, "reason": "..."}`; for a group,
`{"scores": [{"id": 1, "score": <0..1>, "reason": "..."}, ...]}` with every attempt's id exactly
once. The answer must be that object and nothing else (one surrounding ```json fence is
allowed): no score is ever guessed out of free text. A malformed answer raises `Malformed`
naming the problem, which `service.py` quotes back to the judge when it asks again.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

Message = dict[str, str]

POINTWISE_SYSTEM = (
    "You are a strict, fair judge of an AI agent's work. Score the work against the rubric, from 0 "
    "(fails it entirely) to 1 (meets it fully). Answer with only this JSON object and nothing else: "
    '{"score": <a number from 0 to 1>, "reason": "<one short sentence>"}'
)
GROUP_SYSTEM = (
    "You are a strict, fair judge of an AI agent's work. You are shown {n} attempts at the same "
    "task. Score each attempt against the rubric, from 0 to 1, relative to the others: a better "
    "attempt gets a higher score, equally good attempts get equal scores. Answer with only this "
    'JSON object and nothing else: {{"scores": [{{"id": <attempt id>, "score": <0 to 1>, "reason": '
    '"<one short sentence>"}}, ...]}} with one entry for each attempt id from 1 to {n}.'
)
FENCE = re.compile(r"^```(?:json)?\s*\n?(.*?)\n?```$", re.DOTALL)


class Malformed(ValueError):
    """The judge's answer is not the JSON object it was asked for (the message says how)."""


@dataclass(frozen=True)
class Verdict:
    score: float
    reason: str


def pointwise_messages(rubric: str, transcript: str) -> list[Message]:
    return [{"role": "system", "content": POINTWISE_SYSTEM},
            {"role": "user", "content": f"Rubric:\n{rubric}\n\nThe agent's work:\n{transcript}"}]


def group_messages(rubric: str, transcripts: Sequence[str]) -> list[Message]:
    attempts = "\n\n".join(f"=== Attempt {i} ===\n{text}" for i, text in enumerate(transcripts, 1))
    return [{"role": "system", "content": GROUP_SYSTEM.format(n=len(transcripts))},
            {"role": "user", "content": f"Rubric:\n{rubric}\n\n{attempts}"}]


def retry_message(problem: str, *, group: bool) -> Message:
    shape = '{"scores": [{"id": ..., "score": ..., "reason": ...}, ...]}' if group else \
        '{"score": ..., "reason": ...}'
    return {"role": "user", "content": f"Your answer could not be read: {problem}. Answer again with only "
                                       f"the JSON object {shape}, nothing before or after it."}


def _object(text: str) -> dict[str, Any]:
    body = text.strip()
    fenced = FENCE.match(body)
    if fenced:
        body = fenced.group(1).strip()
    if not body:
        raise Malformed("the answer is empty")
    try:
        value = json.loads(body)
    except json.JSONDecodeError as exc:
        raise Malformed(f"it is not one JSON object ({exc.msg} at character {exc.pos})") from None
    if not isinstance(value, dict):
        raise Malformed(f"it is JSON {type(value).__name__}, not an object")
    return value


def _score(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise Malformed(f"{where} is {value!r}, not a number")
    if not 0.0 <= value <= 1.0:
        raise Malformed(f"{where} is {value!r}, outside 0..1")
    return float(value)


def _reason(value: Any) -> str:
    return value if isinstance(value, str) else ""


def parse_pointwise(text: str) -> Verdict:
    """The verdict of a pointwise answer, or `Malformed`."""
    answer = _object(text)
    if "score" not in answer:
        raise Malformed(f"the object has no \"score\" (its keys: {sorted(answer)})")
    return Verdict(_score(answer["score"], '"score"'), _reason(answer.get("reason")))


def parse_group(text: str, size: int) -> list[Verdict]:
    """One verdict per attempt (in attempt order) of a group answer, or `Malformed`."""
    answer = _object(text)
    entries = answer.get("scores")
    if not isinstance(entries, list):
        raise Malformed(f"the object has no \"scores\" list (its keys: {sorted(answer)})")
    found: dict[int, Verdict] = {}
    for entry in entries:
        if not isinstance(entry, dict) or isinstance(entry.get("id"), bool) or not isinstance(entry.get("id"), int):
            raise Malformed(f"each entry needs an integer \"id\", got {entry!r}")
        number = entry["id"]
        if not 1 <= number <= size or number in found:
            raise Malformed(f"attempt id {number} is {'repeated' if number in found else f'not one of 1..{size}'}")
        found[number] = Verdict(_score(entry.get("score"), f"the score of attempt {number}"), _reason(entry.get("reason")))
    missing = [i for i in range(1, size + 1) if i not in found]
    if missing:
        raise Malformed(f"attempt(s) {missing} have no score")
    return [found[i] for i in range(1, size + 1)]
