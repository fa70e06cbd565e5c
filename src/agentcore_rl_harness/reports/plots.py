"""The geometry of report.html's inline SVG plots, as shapes the template draws in order.

Coordinates are formatted here (one decimal) so the page does not change between renders; every
text (task names, phases) stays a plain string and is escaped by the template.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar

from ..records import Rollout
from .model import ITEM_PHASE, Report
from .text import pct

HISTOGRAM_BINS = 10
WIDTH, HEIGHT, PAD = 460, 240, 40
_AXIS, _GRID, _LINE = "#57606a", "#eaeef2", "#0969da"
_PRE, _POST, _WHISKER = "#8c959f", "#2da44e", "#1b1f24"


@dataclass(frozen=True)
class Segment:
    kind: ClassVar[str] = "segment"
    x1: str
    y1: str
    x2: str
    y2: str
    stroke: str


@dataclass(frozen=True)
class Bar:
    kind: ClassVar[str] = "bar"
    x: str
    y: str
    width: str
    height: str
    fill: str
    title: str


@dataclass(frozen=True)
class Label:
    kind: ClassVar[str] = "label"
    x: str
    y: str
    text: str
    anchor: str | None = None


@dataclass(frozen=True)
class Dot:
    kind: ClassVar[str] = "dot"
    cx: str
    cy: str
    title: str


@dataclass(frozen=True)
class Polyline:
    kind: ClassVar[str] = "polyline"
    points: str


Shape = Segment | Bar | Label | Dot | Polyline


@dataclass(frozen=True)
class Plot:
    """One plot: a title, a legend of (label, colour), and the shapes drawn in this order."""

    title: str
    shapes: tuple[Shape, ...]
    legend: tuple[tuple[str, str], ...] = ()
    width: int = WIDTH
    height: int = HEIGHT


def _f(value: float) -> str:
    return f"{value:.1f}"


def _y(value: float, low: float = 0.0, high: float = 1.0) -> float:
    span = (high - low) or 1.0
    return HEIGHT - PAD - (value - low) / span * (HEIGHT - PAD - 10)


def _frame(low: float, high: float, fmt: Callable[[float], str]) -> list[Shape]:
    """The two axes, then five y ticks with their grid lines."""
    shapes: list[Shape] = [
        Segment(str(PAD), str(HEIGHT - PAD), str(WIDTH - 10), str(HEIGHT - PAD), _AXIS),
        Segment(str(PAD), "10", str(PAD), str(HEIGHT - PAD), _AXIS),
    ]
    for i in range(5):
        value = low + (high - low) * i / 4
        y = _y(value, low, high)
        shapes.append(Label(str(PAD - 4), _f(y + 4), fmt(value), anchor="end"))
        shapes.append(Segment(str(PAD), _f(y), str(WIDTH - 10), _f(y), _GRID))
    return shapes


def success_plot(report: Report) -> Plot | None:
    """Success rate per task with its 95% Wilson interval; pre and post side by side."""
    if report.pre is not None and report.post is not None:
        series = [("pre", _PRE, report.pre.tasks), ("post", _POST, report.post.tasks)]
        title = "Success per task, pre vs post training (95% Wilson CI)"
    else:
        phase = ITEM_PHASE.get(report.run.mode, report.run.mode)
        series = [(phase, _POST, report.tasks)]
        title = "Success per task (95% Wilson CI)"
    tasks = sorted({task for _, _, tasks in series for task in tasks})
    if not tasks:
        return None
    slot = (WIDTH - PAD - 10) / len(tasks)
    bar = slot * 0.8 / len(series)
    shapes = _frame(0.0, 1.0, lambda v: f"{100 * v:.0f}%")
    for t_index, task in enumerate(tasks):
        x0 = PAD + t_index * slot + slot * 0.1
        for s_index, (label, color, summaries) in enumerate(series):
            summary = summaries.get(task)
            if summary is None or summary.success_rate.value is None:
                continue
            rate = summary.success_rate
            x = x0 + s_index * bar
            top = _y(rate.value)
            shapes.append(Bar(
                _f(x), _f(top), _f(bar * 0.9), _f(HEIGHT - PAD - top), color,
                f"{task} {label}: {pct(rate.value)} [{pct(rate.ci_low)}, {pct(rate.ci_high)}] "
                f"n={rate.n}",
            ))
            shapes.append(Segment(
                _f(x + bar * 0.45), _f(_y(rate.ci_low)), _f(x + bar * 0.45), _f(_y(rate.ci_high)),
                _WHISKER,
            ))
        shapes.append(Label(_f(x0), str(HEIGHT - PAD + 14), task[:24]))
    legend = tuple((label, color) for label, color, _ in series)
    return Plot(title, tuple(shapes), legend)


def train_plot(report: Report) -> Plot | None:
    """Mean training reward per step."""
    points = [(s.step, s.reward_mean) for s in report.train or () if s.reward_mean is not None]
    if not points:
        return None
    low = min(0.0, min(v for _, v in points))
    high = max(1.0, max(v for _, v in points))
    last = max(step for step, _ in points) or 1
    coords = [(PAD + step / last * (WIDTH - PAD - 20), _y(value, low, high))
              for step, value in points]
    shapes = _frame(low, high, lambda v: f"{v:.2f}")
    shapes.append(Polyline(" ".join(f"{_f(x)},{_f(y)}" for x, y in coords)))
    shapes += [Dot(_f(x), _f(y), f"step {step}: {value:.3f}")
               for (x, y), (step, value) in zip(coords, points)]
    shapes.append(Label(str(WIDTH - 60), str(HEIGHT - PAD + 14), f"step {last}"))
    return Plot("Training reward per step", tuple(shapes))


def histogram(report: Report, rollouts: Sequence[Rollout]) -> Plot | None:
    """Rewards in HISTOGRAM_BINS equal bins, per phase."""
    phases = ["pre", "post"] if report.pre is not None else [
        ITEM_PHASE.get(report.run.mode, report.run.mode)]
    colors = {"pre": _PRE}
    values = {p: [r.reward for r in rollouts if r.phase == p and r.reward is not None]
              for p in phases}
    every = [v for vs in values.values() for v in vs]
    if not every:
        return None
    low, high = min(every), max(every)
    width = (high - low) / HISTOGRAM_BINS or 1.0
    counts = {p: [0] * HISTOGRAM_BINS for p in phases}
    for phase, vs in values.items():
        for v in vs:
            counts[phase][min(HISTOGRAM_BINS - 1, int((v - low) / width))] += 1
    peak = max(max(c) for c in counts.values()) or 1
    slot = (WIDTH - PAD - 10) / HISTOGRAM_BINS
    bar = slot * 0.9 / len(phases)
    shapes = _frame(0, peak, lambda v: f"{v:.3g}")
    for b in range(HISTOGRAM_BINS):
        for index, phase in enumerate(phases):
            count = counts[phase][b]
            top = _y(count, 0, peak)
            shapes.append(Bar(
                _f(PAD + b * slot + index * bar), _f(top), _f(bar), _f(HEIGHT - PAD - top),
                colors.get(phase, _POST),
                f"{phase}: {count} in [{low + b * width:.3g}, {low + (b + 1) * width:.3g})",
            ))
    shapes.append(Label(str(PAD), str(HEIGHT - PAD + 14), f"{low:.3g}"))
    shapes.append(Label(str(WIDTH - 40), str(HEIGHT - PAD + 14), f"{high:.3g}"))
    legend = tuple((p, colors.get(p, _POST)) for p in phases)
    return Plot("Reward histogram", tuple(shapes), legend)
