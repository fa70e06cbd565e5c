"""The viewer's pages as HTML strings, the same for the server and for a static bundle.

Templates (`templates/*.jinja`) are rendered with Jinja2's autoescape, so every value from an
agent, a dataset or a config lands escaped; the page's own script and style are inlined and a
Content Security Policy allows only them (by hash). Links are relative and end in `.html`, so a
bundle written to disk has the server's URL layout: `index.html`, `run/KEY/index.html`,
`run/KEY/rollout/N.html`, `run/KEY/compare/N.html`.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2

from ..reports.tokenizer import Tokenizer, find_tokenizer
from ..reports.transcript import Message, transcript
from .index import DEMO_PHASE, Filter, Page, RolloutRow
from .inflight import read_inflight
from .runs import Run

TOKENS_PER_PAGE = 4000
PAIRED_PHASES = {"pre": "post", "post": "pre"}


@functools.cache
def _environment() -> jinja2.Environment:
    return _with_globals(jinja2.Environment(
        loader=jinja2.PackageLoader(__package__, "templates"), autoescape=True,
        trim_blocks=True, lstrip_blocks=True, undefined=jinja2.StrictUndefined,
    ))


def _with_globals(environment: jinja2.Environment) -> jinja2.Environment:
    environment.globals.update(columns=COLUMNS, cells=cells, pager_query=pager_query)
    return environment


COLUMNS = ("#", "task", "row", "sample", "phase", "step", "status", "reward", "rewards", "turns",
           "tokens", "seconds")


def cells(row: RolloutRow) -> list[str]:
    """The table cells of a row as text (the live update builds new rows from these too)."""
    reward = "" if row.reward is None else f"{row.reward:.4g}"
    rewards = ", ".join(f"{name} {value:.3g}" if isinstance(value, (int, float)) else f"{name} {value}"
                        for name, value in sorted(row.rewards.items()))
    phase = f"{row.phase} (demonstration)" if row.demo else row.phase
    return [str(row.number), row.task, row.row_id, str(row.sample_index), phase,
            "" if row.step is None else str(row.step), row.status, reward, rewards, str(row.turns),
            str(row.tokens), f"{row.elapsed_s:.1f}"]


def pager_query(query: Filter, start: int) -> str:
    from urllib.parse import urlencode

    return urlencode({"outcome": query.outcome, "phase": query.phase, "status": query.status,
                      "task": query.task, "q": query.search, "start": max(0, start)})


@functools.cache
def _asset(name: str) -> tuple[str, str]:
    source, _, _ = _environment().loader.get_source(_environment(), name)
    return source, base64.b64encode(hashlib.sha256(source.encode()).digest()).decode()


def _render(template: str, *, root: str, mode: str, **values: Any) -> str:
    script, script_hash = _asset("viewer.js")
    style, style_hash = _asset("viewer.css")
    return _environment().get_template(template).render(
        root=root, mode=mode, script=script, script_hash=script_hash, style=style,
        style_hash=style_hash, **values)


@dataclass(frozen=True)
class PhaseStats:
    phase: str
    rollouts: int
    successes: int
    mean_reward: float | None
    failures: dict[str, int]

    @property
    def rate(self) -> str:
        return f"{100 * self.successes / self.rollouts:.1f}%" if self.rollouts else "n/a"


def phase_stats(rows: tuple[RolloutRow, ...]) -> list[PhaseStats]:
    by_phase: dict[str, list[RolloutRow]] = {}
    for row in rows:
        by_phase.setdefault(row.phase, []).append(row)
    stats = []
    for phase, members in by_phase.items():
        rewards = [row.reward for row in members if row.reward is not None]
        failures: dict[str, int] = {}
        for row in members:
            if row.status != "completed":
                failures[row.status] = failures.get(row.status, 0) + 1
        stats.append(PhaseStats(phase, len(members), sum(row.success is True for row in members),
                                sum(rewards) / len(rewards) if rewards else None, failures))
    return stats


def runs_page(runs: list[Run], *, mode: str) -> str:
    listed = [(run, run.index.refresh(), run.live()) for run in runs]
    return _render("runs.html.jinja", root="", mode=mode, runs=listed)


def run_page(run: Run, query: Filter, *, start: int, limit: int, mode: str) -> str:
    total = run.index.refresh()
    page: Page = run.index.page(query, start=start, limit=limit)
    report = run.report() or {}
    return _render(
        "run.html.jinja", root="../../", mode=mode, run=run, page=page, query=query, total=total,
        limit=limit, live=run.live(), phases=phase_stats(run.index.rows()),
        deltas=_deltas(report), curve=training_curve(run.steps()), config_text=run.config_text(),
        run_mode=run.mode() or (report.get("run") or {}).get("mode", ""),
        model=run.model_name(), bad_lines=run.index.bad_lines, demo_phase=DEMO_PHASE,
        inflight=read_inflight(run.run_dir) if mode == "server" else None,  # a bundle is a snapshot
    )


def _deltas(report: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    delta = report.get("delta") or {}
    rows = [("overall", delta["overall"])] if delta.get("overall") else []
    return rows + sorted((delta.get("tasks") or {}).items())


def rollout_page(run: Run, number: int, *, tokenizer_dir: Path | None, token_start: int,
                 mode: str, token_limit: int = TOKENS_PER_PAGE) -> str:
    row = run.index.row(number)
    record = run.index.record(number)
    tokenizer = find_tokenizer(run.model_name(), tokenizer_dir)
    traces = [trace_view(trace, tokenizer, token_start, token_limit, number)
              for number, trace in enumerate(record.get("traces") or [])]
    return _render(
        "rollout.html.jinja", root="../../../", mode=mode, run=run, row=row, record=record,
        result=json.dumps(record.get("result"), indent=2, ensure_ascii=False, default=str),
        traces=traces, tokenizer=tokenizer, token_start=token_start, token_limit=token_limit,
        others=same_row(run, row), pair=paired(run, row), demo_phase=DEMO_PHASE,
    )


def compare_page(run: Run, number: int, *, tokenizer_dir: Path | None, mode: str) -> str:
    row = run.index.row(number)
    other = paired(run, row)
    tokenizer = find_tokenizer(run.model_name(), tokenizer_dir)
    sides = []
    for side in (row, other) if other else (row,):
        record = run.index.record(side.number)
        messages = [trace_messages(trace, tokenizer) for trace in record.get("traces") or []]
        sides.append((side, record, messages, json.dumps(record.get("result"), indent=2,
                                                          ensure_ascii=False, default=str)))
    sides.sort(key=lambda side: side[0].phase != "pre")
    return _render("compare.html.jinja", root="../../../", mode=mode, run=run, row=row,
                   sides=sides)


def same_row(run: Run, row: RolloutRow) -> list[RolloutRow]:
    return [other for other in run.index.rows()
            if other.task == row.task and other.row_id == row.row_id and other is not row]


def paired(run: Run, row: RolloutRow) -> RolloutRow | None:
    """The same (task, row, sample) in the other of pre / post, the latest one written."""
    phase = PAIRED_PHASES.get(row.phase)
    match = None
    for other in run.index.rows():
        if (other.phase == phase and other.task == row.task and other.row_id == row.row_id
                and other.sample_index == row.sample_index):
            match = other
    return match


@dataclass(frozen=True)
class TokenView:
    """One token of the token view. `kind`: prompt, trained or masked (context after the
    prompt: tool results, template glue); `origin`: sampled, forced or context."""

    position: int
    token_id: int
    text: str
    kind: str
    mask: int | None
    logprob: float | None
    origin: str


@dataclass(frozen=True)
class TraceView:
    number: int
    trace: dict[str, Any]
    messages: list[Message]
    tokens: list[TokenView]
    total_tokens: int
    trained: int
    forced: bool
    policy_versions: list[Any]
    metadata: str


def trace_view(trace: dict[str, Any], tokenizer: Tokenizer, start: int, limit: int,
               number: int = 0) -> TraceView:
    token_ids, prompt_length = trace["token_ids"], trace["prompt_length"]
    metadata = trace.get("metadata") or {}
    forced = bool(metadata.get("teacher_forced"))
    end = min(len(token_ids), start + limit)
    pieces = tokenizer.pieces(token_ids[start:end])
    tokens = []
    for position, text in zip(range(start, end), pieces):
        tail = position - prompt_length
        mask = trace["loss_mask"][tail] if tail >= 0 else None
        logprob = trace["logprobs"][tail] if tail >= 0 else None
        kind = "prompt" if tail < 0 else "trained" if mask else "masked"
        origin = ("forced" if forced else "sampled") if mask else "context"
        tokens.append(TokenView(position, token_ids[position], text, kind, mask, logprob, origin))
    return TraceView(
        number=number, trace=trace, messages=trace_messages(trace, tokenizer), tokens=tokens,
        total_tokens=len(token_ids), trained=sum(trace["loss_mask"]), forced=forced,
        policy_versions=list(metadata.get("policy_versions") or []),
        metadata=json.dumps(metadata, sort_keys=True, indent=1, default=str),
    )


@dataclass(frozen=True)
class Curve:
    """The training curve as SVG polylines: reward mean and loss per trainer step."""

    width: int
    height: int
    lines: list[tuple[str, str, str]]  # (label, colour, points)
    steps: int
    labels: list[tuple[int, int, str]]


def training_curve(steps: list[dict[str, Any]], width: int = 520, height: int = 180) -> Curve | None:
    if not steps:
        return None
    lines, labels = [], []
    for position, (key, colour) in enumerate((("reward_mean", "#1a7f37"), ("loss", "#cf222e"))):
        points = [(index, step.get(key)) for index, step in enumerate(steps)
                  if isinstance(step.get(key), (int, float))]
        if not points:
            continue
        low, high = min(value for _, value in points), max(value for _, value in points)
        span = (high - low) or 1.0
        scale_x = (width - 40) / max(1, len(steps) - 1)
        coords = " ".join(f"{20 + index * scale_x:.1f},{height - 20 - (value - low) / span * (height - 40):.1f}"
                          for index, value in points)
        lines.append((f"{key} [{low:.3g}, {high:.3g}]", colour, coords))
        labels.append((20, 14 + 14 * position, f"{key}: {low:.3g} – {high:.3g}"))
    return Curve(width, height, lines, len(steps), labels) if lines else None


def trace_messages(trace: dict[str, Any], tokenizer: Tokenizer) -> list[Message]:
    """The transcript of a trace as rollouts.jsonl stores it."""
    return transcript(trace["token_ids"], trace["prompt_length"], trace["loss_mask"], tokenizer)
