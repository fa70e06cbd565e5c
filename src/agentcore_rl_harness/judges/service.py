"""Asking the judge: retries, the answer cache, the concurrency limit, and usage lines.

`JudgeService.score` (pointwise) and `score_group` (a GRPO group in one call) build the question
(`protocol.py`), then `_ask`: an identical question already asked in this process or kept in the
cache (`RUN_DIR/judge/cache.jsonl`, keyed by the judge's identity and the messages, which hold
the rubric and the transcripts) is answered from there, so rescore and resume do not pay twice;
otherwise the judge is called (at most `roles.judge.concurrency` calls at once). A malformed
answer is quoted back to the judge and asked again, a failed call is retried, `retries` times;
then `JudgeError` (the rollout becomes `judge_error`, never a silent 0). Every question writes
one line to `usage.jsonl` (tokens, cost, attempts, cached or not) for the report's role usage.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..errors import HarnessError, JudgeError
from .clients import JudgeAnswer, JudgeCallError, JudgeClient
from .config import JudgeConfig
from .protocol import Malformed, Message, Verdict, group_messages, parse_group, parse_pointwise, pointwise_messages, retry_message

CACHE_FILE = "cache.jsonl"
USAGE_FILE = "usage.jsonl"


class AnswerCache:
    """Valid answers by question key, one JSON line each (append-only; last line wins)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._answers: dict[str, str] = {}
        if path.is_file():
            for line in path.read_text(encoding="utf-8").splitlines():
                try:
                    entry = json.loads(line)
                    self._answers[entry["key"]] = entry["answer"]
                except (ValueError, KeyError, TypeError):
                    continue  # a line cut short by a kill: that answer is asked again
        self.loaded = len(self._answers)

    def get(self, key: str) -> str | None:
        return self._answers.get(key)

    def put(self, key: str, judge: str, answer: str) -> None:
        with self._lock:
            self._answers[key] = answer
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a", encoding="utf-8") as out:
                out.write(json.dumps({"key": key, "judge": judge, "answer": answer}) + "\n")


def question_key(judge: str, messages: Sequence[Message]) -> str:
    return hashlib.sha256(json.dumps({"judge": judge, "messages": list(messages)}, sort_keys=True).encode()).hexdigest()


class JudgeService:
    """The run's judge (`roles.judge`); its client is made on the first question not cached."""

    def __init__(self, config: JudgeConfig, *, identity: str, client: Callable[[], JudgeClient],
                 cache_dir: Path | None, usage_dir: Path | None, role: str = "judge") -> None:
        self.config, self.identity, self.role = config, identity, role
        self._make_client = client
        self._client: JudgeClient | None = None
        self.cache = AnswerCache(cache_dir / CACHE_FILE) if config.cache and cache_dir is not None else None
        self._usage_path = usage_dir / USAGE_FILE if usage_dir is not None else None
        self._slots: asyncio.Semaphore | None = None
        self._asked: dict[str, asyncio.Future[list[Verdict]]] = {}
        self.calls = 0  # judge calls made (every attempt)

    async def score(self, *, rubric: str, transcript: str) -> float:
        """One rollout's score in [0, 1] (pointwise)."""
        verdicts = await self._ask(pointwise_messages(rubric, transcript), lambda text: [parse_pointwise(text)],
                                   group_size=1)
        return verdicts[0].score

    async def score_group(self, *, rubric: str, transcripts: Sequence[str], index: int) -> float:
        """Attempt `index`'s score among `transcripts`, judged together in one call."""
        size = len(transcripts)
        verdicts = await self._ask(group_messages(rubric, transcripts), lambda text: parse_group(text, size),
                                   group_size=size)
        return verdicts[index].score

    async def _ask(self, messages: list[Message], parse: Callable[[str], list[Verdict]], *,
                   group_size: int) -> list[Verdict]:
        key = question_key(self.identity, messages)
        asked = self._asked.get(key)
        if asked is None:  # one question, asked once however many rollouts wait on it
            asked = self._asked[key] = asyncio.ensure_future(self._answer(key, messages, parse, group_size))
        return await asyncio.shield(asked)

    async def _answer(self, key: str, messages: list[Message], parse: Callable[[str], list[Verdict]],
                      group_size: int) -> list[Verdict]:
        kept = self.cache.get(key) if self.cache is not None else None
        if kept is not None:
            try:
                verdicts = parse(kept)
                self._usage(group_size, cached=True, attempts=0, failed=0, prompt=0, completion=0, ok=True)
                return verdicts
            except Malformed:
                pass  # a cache line from another protocol version: ask again
        conversation, problem = list(messages), ""
        prompt = completion = failed = 0
        attempts = self.config.retries + 1
        for _ in range(attempts):
            try:
                answer = await self._call(conversation)
            except JudgeCallError as exc:
                failed, problem = failed + 1, str(exc)
                continue
            prompt, completion = prompt + answer.prompt_tokens, completion + answer.completion_tokens
            try:
                verdicts = parse(answer.text)
            except Malformed as exc:
                failed += 1
                problem = f"malformed answer {_clip(answer.text)!r}: {exc}"
                conversation = [*messages, {"role": "assistant", "content": answer.text},
                                retry_message(str(exc), group=group_size > 1)]
                continue
            if self.cache is not None:
                self.cache.put(key, self.identity, answer.text)
            self._usage(group_size, cached=False, attempts=failed + 1, failed=failed, prompt=prompt,
                        completion=completion, ok=True)
            return verdicts
        self._usage(group_size, cached=False, attempts=attempts, failed=failed, prompt=prompt,
                    completion=completion, ok=False)
        raise JudgeError(
            f"judge_error: the judge ({self.identity}) gave no usable score in {attempts} attempt(s) "
            f"(roles.judge.retries={self.config.retries}); last: {problem}")

    async def _call(self, conversation: list[Message]) -> JudgeAnswer:
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.config.concurrency)
        async with self._slots:
            if self._client is None:
                try:
                    self._client = self._make_client()
                except HarnessError as exc:  # a key, package or region missing: the judge's, not the task's
                    raise JudgeError(f"judge_error: the judge ({self.identity}) could not be set up: {exc}") from exc
            self.calls += 1
            try:
                return await asyncio.wait_for(self._client.complete(conversation), self.config.timeout_s)
            except asyncio.TimeoutError:
                raise JudgeCallError(f"the judge ({self.identity}) did not answer within "
                                     f"roles.judge.timeout_s={self.config.timeout_s}s") from None

    def _usage(self, group_size: int, *, cached: bool, attempts: int, failed: int, prompt: int, completion: int,
               ok: bool) -> None:
        if self._usage_path is None:
            return
        line: dict[str, Any] = {
            "role": self.role, "judge": self.identity, "group_size": group_size, "cached": cached,
            "attempts": attempts, "failed_attempts": failed, "ok": ok, "prompt_tokens": prompt,
            "completion_tokens": completion, "cost_usd": self.config.price.cost(prompt, completion)}
        self._usage_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self._usage_path, "a", encoding="utf-8") as out:
            out.write(json.dumps(line) + "\n")

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()


def _clip(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[:limit] + "..."
