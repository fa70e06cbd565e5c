"""report.html: one self-contained offline page (inline CSS, JS and SVG; nothing fetched).

The markup is `templates/report.html.jinja`, rendered with Jinja2's autoescape: every string
that comes from an agent, a dataset or a config is escaped where the template places it, and
this module only computes values (rows, decoded tokens, plot geometry in `plots.py`). The page's
own script (`templates/report.js`) never builds markup from data, and a Content Security Policy
allows only that script (by hash), so an injected handler or tag would not run anyway.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass

import jinja2

from ..records import Rollout, Trace
from ..viewer.links import rollout_link
from .model import Report, Summary
from .plots import histogram, success_plot, train_plot
from .text import budget_note, interrupted_banner, num as _num, pct as _pct, training_banner, verdict_line
from .tokenizer import Tokenizer
from .transcript import Message, conversation

TOKENS_SHOWN_PER_TRACE = 2000

NO_TOKENIZER = Tokenizer(None, "no tokenizer")


@dataclass(frozen=True)
class SummaryRow:
    """One row of the summary table (a task, a tag or overall), each cell as shown."""

    name: str
    success: str
    n: int
    reward: str
    pass_at_1: str
    pass_hat_k: str
    delta: str
    failures: str
    retried: int


@dataclass(frozen=True)
class TokenRun:
    kind: str
    start: int
    end: int
    text: str


@dataclass(frozen=True)
class TraceView:
    tokens: int
    prompt_length: int
    trained: int
    finish_reason: str | None
    runs: str
    pieces: tuple[TokenRun, ...]
    hidden: int
    metadata: str


@dataclass(frozen=True)
class Detail:
    """What a rollout's <details> shows besides the rollout's own fields."""

    rollout: Rollout
    title: str
    rewards: str
    result: str
    traces: tuple[TraceView, ...]
    transcript: tuple[Message, ...]


@dataclass(frozen=True)
class RewardRow:
    """One reward function's mean in one phase and task (or overall)."""

    phase: str
    task: str
    name: str
    mean: str
    n: int


@functools.cache
def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.PackageLoader(__package__, "templates"),
        autoescape=True,
        trim_blocks=True,
        lstrip_blocks=True,
        undefined=jinja2.StrictUndefined,
    )


@functools.cache
def _script() -> str:
    source, _, _ = _environment().loader.get_source(_environment(), "report.js")
    return source


def render_html(
    report: Report, rollouts: Sequence[Rollout], *, tokenizer: Tokenizer = NO_TOKENIZER,
) -> str:
    """The page; tokens decoded with `tokenizer` (shown as ids when it was not found)."""
    script = _script()
    model = report.run.config.get("model", {})
    ordered = sorted(rollouts, key=lambda r: (r.phase != "pre", r.phase, r.task, r.row_id,
                                              r.sample_index, r.step or 0))
    plots = (success_plot(report), train_plot(report), histogram(report, rollouts))
    return _environment().get_template("report.html.jinja").render(
        run=report.run,
        model_name=model.get("name") if isinstance(model, dict) else model,
        verdict=verdict_line(report),
        banners=[text for text in (interrupted_banner(report), training_banner(report), budget_note(report)) if text],
        summary_rows=_summary_rows(report),
        reward_rows=reward_rows(report),
        plots=[plot for plot in plots if plot is not None],
        rollouts=ordered,
        details=[_detail(rollout, tokenizer) for rollout in ordered],
        denominator=report.overall.denominator,
        viewer_links=[rollout_link(report.run.id, rollout.session_id) for rollout in ordered],
        script=script,
        script_hash=base64.b64encode(hashlib.sha256(script.encode()).digest()).decode(),
    )


def _summary_rows(report: Report) -> list[SummaryRow]:
    rows = [*report.tasks.items(), *((f"tag:{t}", s) for t, s in report.tags.items()),
            ("overall", report.overall)]
    deltas = report.delta.tasks if report.delta else {}
    shown = []
    for name, summary in rows:
        delta = report.delta.overall if name == "overall" and report.delta else deltas.get(name)
        shown.append(SummaryRow(
            name=name,
            success=_interval(summary),
            n=summary.success_rate.n,
            reward=_reward(summary),
            pass_at_1=_pct(summary.pass_at_k.get("1")),
            pass_hat_k=_pass_hat(summary),
            delta="—" if delta is None or delta.delta is None else
            f"{100 * delta.delta:+.1f}pp (p={delta.p_value:.3g})",
            failures=", ".join(f"{k}: {v}" for k, v in summary.failures.items()) or "—",
            retried=summary.retried,
        ))
    return shown


def phase_summaries(report: Report) -> list[tuple[str, str, Summary]]:
    """(phase, task or "overall", summary) of every phase the report holds."""
    from .model import ITEM_PHASE

    phases = [(phase, part.tasks, part.overall) for phase, part in (("pre", report.pre), ("warmup", report.warmup))
              if part is not None]
    phases.append((ITEM_PHASE.get(report.run.mode, report.run.mode), report.tasks, report.overall))
    rows = []
    for phase, tasks, overall in phases:
        rows += [(phase, task, summary) for task, summary in tasks.items()]
        if len(tasks) > 1:
            rows.append((phase, "overall", overall))
    return rows


def reward_rows(report: Report) -> list[RewardRow]:
    return [RewardRow(phase=phase, task=task, name=name, n=mean.n,
                      mean="n/a" if mean.value is None else f"{mean.value:.3f} [{_num(mean.ci_low)}, {_num(mean.ci_high)}]")
            for phase, task, summary in phase_summaries(report) for name, mean in summary.reward_means.items()]


def _interval(summary: Summary) -> str:
    rate = summary.success_rate
    return f"{_pct(rate.value)} [{_pct(rate.ci_low)}, {_pct(rate.ci_high)}]"


def _reward(summary: Summary) -> str:
    reward = summary.mean_reward
    if reward.value is None:
        return "n/a"
    return f"{reward.value:.3f} [{_num(reward.ci_low)}, {_num(reward.ci_high)}]"


def _pass_hat(summary: Summary) -> str:
    k = summary.samples_per_row
    return f"pass^{k} {_pct(summary.pass_hat_k.get(str(k)))}" if k else "n/a"


def _detail(rollout: Rollout, tokenizer: Tokenizer) -> Detail:
    title = (f"{rollout.task} / {rollout.row_id} / sample {rollout.sample_index} / "
             f"{rollout.phase}" + ("" if rollout.step is None else f" step {rollout.step}"))
    return Detail(
        rollout=rollout,
        title=title,
        rewards=json.dumps(rollout.rewards, sort_keys=True),
        result=json.dumps(rollout.result, indent=2, ensure_ascii=False, default=str),
        traces=tuple(_trace_view(trace, tokenizer) for trace in rollout.traces),
        transcript=conversation(rollout, tokenizer) if tokenizer.found else (),
    )


def mask_runs(trace: Trace) -> list[tuple[str, int, int]]:
    """(kind, start, end) spans over token_ids: prompt, then trained / masked runs."""
    runs = [("prompt", 0, trace.prompt_length)] if trace.prompt_length else []
    for offset, mask in enumerate(trace.loss_mask):
        kind = "trained" if mask else "masked"
        position = trace.prompt_length + offset
        if runs and runs[-1][0] == kind and runs[-1][2] == position:
            runs[-1] = (kind, runs[-1][1], position + 1)
        else:
            runs.append((kind, position, position + 1))
    return runs


def _trace_view(trace: Trace, tokenizer: Tokenizer) -> TraceView:
    runs = mask_runs(trace)
    pieces, budget = [], TOKENS_SHOWN_PER_TRACE
    for kind, start, end in runs:
        if budget <= 0:
            break
        ids = trace.token_ids[start:min(end, start + budget)]
        budget -= len(ids)
        pieces.append(TokenRun(kind, start, end, tokenizer.decode(ids)))
    return TraceView(
        tokens=len(trace.token_ids),
        prompt_length=trace.prompt_length,
        trained=sum(trace.loss_mask),
        finish_reason=trace.finish_reason,
        runs=" · ".join(f"{kind} {end - start}" for kind, start, end in runs),
        pieces=tuple(pieces),
        hidden=len(trace.token_ids) - TOKENS_SHOWN_PER_TRACE,
        metadata=json.dumps(trace.metadata, sort_keys=True, default=str),
    )
