"""report.html: one self-contained offline page (inline CSS, JS and SVG; nothing fetched).

Every string that comes from an agent, a dataset or a config goes through `_e` (HTML-escaped,
quotes included); the page's own script never builds markup from data, and a Content Security
Policy allows only that script (by hash), so an injected handler or tag would not run anyway.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Callable, Sequence
from html import escape
from pathlib import Path

from ..records import Rollout, Trace
from .model import ITEM_PHASE, Report, Summary
from .text import num as _num, pct as _pct, verdict_line

TOKENS_SHOWN_PER_TRACE = 2000
HISTOGRAM_BINS = 10

_CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:24px;color:#1b1f24;max-width:1400px}
h1{font-size:20px}h2{font-size:16px;margin-top:28px}
table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #d0d7de;padding:3px 8px;
text-align:left;vertical-align:top}th{background:#f6f8fa}th.sortable{cursor:pointer}
th.sortable:after{content:" \\2195";color:#8c959f}.verdict{font-weight:600;font-size:15px}
.ok{color:#1a7f37}.bad{color:#cf222e}.muted{color:#57606a}
.plots{display:flex;flex-wrap:wrap;gap:24px}.plot{border:1px solid #d0d7de;padding:8px}
pre{background:#f6f8fa;padding:8px;white-space:pre-wrap;word-break:break-all;max-height:400px;
overflow:auto}details{margin:4px 0}summary{cursor:pointer}
.tok{font-family:ui-monospace,monospace;font-size:12px;white-space:pre-wrap;word-break:break-all}
.run{border-radius:3px;padding:0 2px}.prompt{background:#eaeef2;color:#57606a}
.trained{background:#dafbe1}.masked{background:#fff1c2}
"""

_SCRIPT = """
(function(){
  function key(row, col){
    var cell = row.children[col];
    var v = cell.getAttribute('data-v');
    if (v === null) { v = cell.textContent; }
    var n = parseFloat(v);
    return isNaN(n) || String(n) !== v.trim() ? v : n;
  }
  var tables = document.querySelectorAll('table.sortable');
  for (var t = 0; t < tables.length; t++) {
    (function(table){
      var heads = table.querySelectorAll('th');
      for (var i = 0; i < heads.length; i++) {
        (function(col, head){
          head.classList.add('sortable');
          head.addEventListener('click', function(){
            var body = table.tBodies[0];
            var rows = Array.prototype.slice.call(body.rows);
            var dir = head.getAttribute('data-dir') === 'asc' ? -1 : 1;
            head.setAttribute('data-dir', dir === 1 ? 'asc' : 'desc');
            rows.sort(function(a, b){
              var x = key(a, col), y = key(b, col);
              if (typeof x !== typeof y) { x = String(x); y = String(y); }
              return x < y ? -dir : x > y ? dir : 0;
            });
            for (var r = 0; r < rows.length; r++) { body.appendChild(rows[r]); }
          });
        })(i, heads[i]);
      }
    })(tables[t]);
  }
  document.body.setAttribute('data-ok', String(document.querySelectorAll('tr.rollout').length));
})();
"""


def _e(value: object) -> str:
    return escape(str(value), quote=True)


def render_html(
    report: Report, rollouts: Sequence[Rollout], *, tokenizer: Path | None = None,
) -> str:
    decode = _decoder(tokenizer)
    script_hash = base64.b64encode(hashlib.sha256(_SCRIPT.encode()).digest()).decode()
    policy = (f"default-src 'none'; style-src 'unsafe-inline'; img-src data:; "
              f"script-src 'sha256-{script_hash}'")
    model = report.run.config.get("model", {})
    model_name = model.get("name") if isinstance(model, dict) else model
    ordered = sorted(rollouts, key=lambda r: (r.phase != "pre", r.phase, r.task, r.row_id,
                                              r.sample_index, r.step or 0))
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{policy}">',
        f"<title>agentcore-rl {_e(report.run.mode)} report — {_e(report.run.id)}</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>agentcore-rl {_e(report.run.mode)} report — {_e(report.run.id)}</h1>",
        f'<p class="verdict">{_e(verdict_line(report))}</p>',
        f'<p class="muted">model {_e(model_name)} · started {_e(report.run.started_at)} · '
        f"wall time {report.run.wall_time_s:.1f}s · overrides {_e(' '.join(report.run.overrides))}"
        "</p>",
        _summary_table(report),
        '<h2>Plots</h2><div class="plots">',
        _success_plot(report),
        _train_plot(report),
        _histogram(report, rollouts),
        "</div>",
        f"<h2>Rollouts ({len(ordered)})</h2>",
        '<p class="muted">Click a column to sort; click a row id for its result and tokens.</p>',
        _rollout_table(ordered),
        "<h2>Rollout details</h2>",
        *(_detail(index, rollout, decode) for index, rollout in enumerate(ordered)),
        f'<p class="muted">{_e(report.overall.denominator)}</p>',
        f"<script>{_SCRIPT}</script></body></html>",
    ]
    return "\n".join(part for part in parts if part)


# -- tables ----------------------------------------------------------------------------------


def _summary_table(report: Report) -> str:
    rows = [*report.tasks.items(), *((f"tag:{t}", s) for t, s in report.tags.items()),
            ("overall", report.overall)]
    deltas = report.delta.tasks if report.delta else {}
    body = []
    for name, summary in rows:
        delta = report.delta.overall if name == "overall" and report.delta else deltas.get(name)
        body.append(
            "<tr>" + "".join(f"<td>{cell}</td>" for cell in (
                _e(name), _interval(summary), summary.success_rate.n, _reward(summary),
                _pct(summary.pass_at_k.get("1")), _e(_pass_hat(summary)),
                "—" if delta is None or delta.delta is None else
                f"{100 * delta.delta:+.1f}pp (p={delta.p_value:.3g})",
                _e(", ".join(f"{k}: {v}" for k, v in summary.failures.items()) or "—"),
                summary.retried,
            )) + "</tr>"
        )
    head = ("task", "success [95% CI]", "n", "mean reward [95% CI]", "pass@1", "pass^k",
            "delta vs pre", "failures", "retried")
    return _table("summary", head, body)


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


def _table(css_class: str, head: Sequence[str], body: Sequence[str]) -> str:
    header = "".join(f"<th>{_e(h)}</th>" for h in head)
    return (f'<table class="{css_class}"><thead><tr>{header}</tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table>")


def _rollout_table(rollouts: Sequence[Rollout]) -> str:
    body = []
    for index, r in enumerate(rollouts):
        reward = "" if r.reward is None else f"{r.reward:.4g}"
        success = {True: "yes", False: "no", None: "—"}[r.success]
        cells = [
            (r.task, None), (f'<a href="#r{index}">{_e(r.row_id)}</a>', r.row_id),
            (r.sample_index, None), (r.phase, None), ("" if r.step is None else r.step, None),
            (r.status.value, None), (success, None), (reward, reward or "-1e99"),
            (r.turns, None), (r.usage.prompt_tokens, None), (r.usage.completion_tokens, None),
            (f"{r.elapsed_s:.2f}", None), (r.session_id, None),
        ]
        html_cells = []
        for position, (value, sort_value) in enumerate(cells):
            shown = value if position == 1 else _e(value)
            attribute = "" if sort_value is None else f' data-v="{_e(sort_value)}"'
            html_cells.append(f"<td{attribute}>{shown}</td>")
        css = "rollout ok" if r.success else "rollout bad"
        body.append(f'<tr class="{css}" id="row{index}">{"".join(html_cells)}</tr>')
    head = ("task", "row", "sample", "phase", "step", "status", "success", "reward", "turns",
            "prompt tok", "completion tok", "elapsed s", "session")
    return _table("sortable rollouts", head, body)


# -- details ---------------------------------------------------------------------------------


def _detail(index: int, rollout: Rollout, decode: Callable[[Sequence[int]], str] | None) -> str:
    title = (f"{rollout.task} / {rollout.row_id} / sample {rollout.sample_index} / "
             f"{rollout.phase}" + ("" if rollout.step is None else f" step {rollout.step}"))
    parts = [
        f'<details id="r{index}"><summary>{_e(title)} — {_e(rollout.status.value)}</summary>',
        f"<p>session {_e(rollout.session_id)} · reward {_e(rollout.reward)} · rewards "
        f"{_e(json.dumps(rollout.rewards, sort_keys=True))}</p>",
    ]
    if rollout.error:
        parts.append(f'<p class="bad">error:</p><pre>{_e(rollout.error)}</pre>')
    result = json.dumps(rollout.result, indent=2, ensure_ascii=False, default=str)
    parts.append(f"<p>result:</p><pre>{_e(result)}</pre>")
    for number, trace in enumerate(rollout.traces):
        parts.append(_trace_view(number, trace, decode))
    parts.append("</details>")
    return "\n".join(parts)


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


def _trace_view(number: int, trace: Trace, decode) -> str:
    runs = mask_runs(trace)
    trained = sum(trace.loss_mask)
    summary = " · ".join(f"{kind} {end - start}" for kind, start, end in runs)
    pieces, budget = [], TOKENS_SHOWN_PER_TRACE
    for kind, start, end in runs:
        if budget <= 0:
            break
        ids = trace.token_ids[start:min(end, start + budget)]
        budget -= len(ids)
        text = decode(ids) if decode else " ".join(str(i) for i in ids)
        pieces.append(f'<span class="run {kind}" title="{kind}: tokens {start}–{end - 1}">'
                      f"{_e(text)}</span>")
    hidden = len(trace.token_ids) - TOKENS_SHOWN_PER_TRACE
    more = f'<p class="muted">… {hidden} more tokens not shown</p>' if hidden > 0 else ""
    metadata = json.dumps(trace.metadata, sort_keys=True, default=str)
    return (
        f"<p>trace {number}: {len(trace.token_ids)} tokens, prompt {trace.prompt_length}, "
        f"trained {trained}, finish {_e(trace.finish_reason)} · runs: {_e(summary)}</p>"
        f'<div class="tok">{"".join(pieces)}</div>{more}'
        f'<details><summary>trace metadata</summary><pre>{_e(metadata)}</pre></details>'
    )


def _decoder(tokenizer: Path | None) -> Callable[[Sequence[int]], str] | None:
    if tokenizer is None:
        return None
    from transformers import AutoTokenizer

    loaded = AutoTokenizer.from_pretrained(str(tokenizer))
    return lambda ids: loaded.decode(list(ids), skip_special_tokens=False)


# -- plots (inline SVG) ----------------------------------------------------------------------

_W, _H, _PAD = 460, 240, 40


def _svg(title: str, body: str, legend: str = "") -> str:
    return (f'<div class="plot"><div><b>{_e(title)}</b> {legend}</div>'
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{_W}" height="{_H}" '
            f'role="img" aria-label="{_e(title)}">'
            f'<line x1="{_PAD}" y1="{_H - _PAD}" x2="{_W - 10}" y2="{_H - _PAD}" stroke="#57606a"/>'
            f'<line x1="{_PAD}" y1="10" x2="{_PAD}" y2="{_H - _PAD}" stroke="#57606a"/>'
            f"{body}</svg></div>")


def _y(value: float, low: float = 0.0, high: float = 1.0) -> float:
    span = (high - low) or 1.0
    return _H - _PAD - (value - low) / span * (_H - _PAD - 10)


def _y_axis(low: float, high: float, fmt: Callable[[float], str]) -> str:
    ticks = []
    for i in range(5):
        value = low + (high - low) * i / 4
        y = _y(value, low, high)
        ticks.append(f'<text x="{_PAD - 4}" y="{y + 4:.1f}" font-size="10" text-anchor="end">'
                     f"{_e(fmt(value))}</text>"
                     f'<line x1="{_PAD}" y1="{y:.1f}" x2="{_W - 10}" y2="{y:.1f}" '
                     'stroke="#eaeef2"/>')
    return "".join(ticks)


def _success_plot(report: Report) -> str:
    if report.pre is not None and report.post is not None:
        series = [("pre", "#8c959f", report.pre.tasks), ("post", "#2da44e", report.post.tasks)]
        title = "Success per task, pre vs post training (95% Wilson CI)"
    else:
        phase = ITEM_PHASE.get(report.run.mode, report.run.mode)
        series = [(phase, "#2da44e", report.tasks)]
        title = "Success per task (95% Wilson CI)"
    tasks = sorted({task for _, _, tasks in series for task in tasks})
    if not tasks:
        return ""
    slot = (_W - _PAD - 10) / len(tasks)
    bar = slot * 0.8 / len(series)
    body = [_y_axis(0.0, 1.0, lambda v: f"{100 * v:.0f}%")]
    for t_index, task in enumerate(tasks):
        x0 = _PAD + t_index * slot + slot * 0.1
        for s_index, (label, color, summaries) in enumerate(series):
            summary = summaries.get(task)
            if summary is None or summary.success_rate.value is None:
                continue
            rate = summary.success_rate
            x = x0 + s_index * bar
            top = _y(rate.value)
            body.append(
                f'<rect x="{x:.1f}" y="{top:.1f}" width="{bar * 0.9:.1f}" '
                f'height="{_H - _PAD - top:.1f}" fill="{color}"><title>{_e(task)} {_e(label)}: '
                f"{_pct(rate.value)} [{_pct(rate.ci_low)}, {_pct(rate.ci_high)}] n={rate.n}"
                "</title></rect>"
                f'<line x1="{x + bar * 0.45:.1f}" x2="{x + bar * 0.45:.1f}" '
                f'y1="{_y(rate.ci_low):.1f}" y2="{_y(rate.ci_high):.1f}" stroke="#1b1f24"/>'
            )
        body.append(f'<text x="{x0:.1f}" y="{_H - _PAD + 14}" font-size="10">'
                    f"{_e(task[:24])}</text>")
    legend = " ".join(f'<span style="color:{color}">■ {_e(label)}</span>'
                      for label, color, _ in series)
    return _svg(title, "".join(body), legend)


def _train_plot(report: Report) -> str:
    points = [(s.step, s.reward_mean) for s in report.train or () if s.reward_mean is not None]
    if not points:
        return ""
    low = min(0.0, min(v for _, v in points))
    high = max(1.0, max(v for _, v in points))
    last = max(step for step, _ in points) or 1
    coords = [(_PAD + step / last * (_W - _PAD - 20), _y(value, low, high))
              for step, value in points]
    path = " ".join(f"{x:.1f},{y:.1f}" for x, y in coords)
    dots = "".join(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="#0969da"><title>step '
                   f"{step}: {value:.3f}</title></circle>"
                   for (x, y), (step, value) in zip(coords, points))
    body = (_y_axis(low, high, lambda v: f"{v:.2f}")
            + f'<polyline points="{path}" fill="none" stroke="#0969da" stroke-width="2"/>'
            + dots + f'<text x="{_W - 60}" y="{_H - _PAD + 14}" font-size="10">step {last}</text>')
    return _svg("Training reward per step", body)


def _histogram(report: Report, rollouts: Sequence[Rollout]) -> str:
    phases = ["pre", "post"] if report.pre is not None else [
        ITEM_PHASE.get(report.run.mode, report.run.mode)]
    colors = {"pre": "#8c959f"}
    values = {p: [r.reward for r in rollouts if r.phase == p and r.reward is not None]
              for p in phases}
    every = [v for vs in values.values() for v in vs]
    if not every:
        return ""
    low, high = min(every), max(every)
    width = (high - low) / HISTOGRAM_BINS or 1.0
    counts = {p: [0] * HISTOGRAM_BINS for p in phases}
    for phase, vs in values.items():
        for v in vs:
            counts[phase][min(HISTOGRAM_BINS - 1, int((v - low) / width))] += 1
    peak = max(max(c) for c in counts.values()) or 1
    slot = (_W - _PAD - 10) / HISTOGRAM_BINS
    bar = slot * 0.9 / len(phases)
    body = [_y_axis(0, peak, lambda v: f"{v:.3g}")]
    for b in range(HISTOGRAM_BINS):
        for index, phase in enumerate(phases):
            count = counts[phase][b]
            top = _y(count, 0, peak)
            x = _PAD + b * slot + index * bar
            body.append(f'<rect x="{x:.1f}" y="{top:.1f}" width="{bar:.1f}" '
                        f'height="{_H - _PAD - top:.1f}" fill="{colors.get(phase, "#2da44e")}">'
                        f"<title>{_e(phase)}: {count} in [{low + b * width:.3g}, "
                        f"{low + (b + 1) * width:.3g})</title></rect>")
    body.append(f'<text x="{_PAD}" y="{_H - _PAD + 14}" font-size="10">{low:.3g}</text>'
                f'<text x="{_W - 40}" y="{_H - _PAD + 14}" font-size="10">{high:.3g}</text>')
    legend = " ".join(f'<span style="color:{colors.get(p, "#2da44e")}">■ {_e(p)}</span>'
                      for p in phases)
    return _svg("Reward histogram", "".join(body), legend)
