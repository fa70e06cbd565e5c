"""The `report` and `gates` nodes (`conf/report/*.yaml`, `conf/gates/*.yaml`): which report files a
run writes with what live progress, and the CI gates that turn its exit status non-zero."""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..errors import ConfigError, HarnessError
from ..progress import Progress, Terminal, choose_style
from .model import REPORT_FORMATS

PROGRESS_STYLES = ("auto", "lines", "off")


@dataclass(frozen=True)
class ReportConfig:
    """The `report` group: which report files a run writes, and the live progress display."""

    formats: tuple[str, ...] = REPORT_FORMATS  # report files to write (json, md, html, junit); json always among them
    step_summary: bool = True  # append report.md to $GITHUB_STEP_SUMMARY when that is set
    progress: str = "auto"  # auto: a status line redrawn in place on a TTY, lines otherwise; lines; off
    progress_every_pct: float = 10.0  # lines style: one line each time this share more of the phase is done
    progress_every_s: float = 30.0  # lines style: and at least one line this often (seconds)

    def validate(self) -> None:
        unknown = [name for name in self.formats if name not in REPORT_FORMATS]
        if unknown:
            raise ConfigError(
                f"report.formats: unknown format(s) {unknown}; valid choices: {list(REPORT_FORMATS)}"
            )
        if "json" not in self.formats:
            raise ConfigError(
                f"report.formats={list(self.formats)} must include json: report.json is what "
                "gates, --agentcore-rl-compare and baselines read"
            )
        if self.progress not in PROGRESS_STYLES:
            raise ConfigError(f"report.progress={self.progress!r} is not supported; valid choices: "
                              f"{list(PROGRESS_STYLES)}")
        if not 0 < self.progress_every_pct <= 100:
            raise ConfigError(f"report.progress_every_pct={self.progress_every_pct} must be in (0, 100]")
        if self.progress_every_s <= 0:
            raise ConfigError(f"report.progress_every_s={self.progress_every_s} must be > 0")

    def progress_display(self, terminal: Terminal | None) -> Progress:
        """A run's live progress on `terminal` as this node sets it (`auto`: by whether it is a TTY)."""
        isatty = bool(terminal is not None and terminal.isatty)
        return Progress(terminal, style=choose_style(self.progress, isatty=isatty, environ=os.environ),
                        every_pct=self.progress_every_pct, every_s=self.progress_every_s)


@dataclass(frozen=True)
class GatesConfig:
    """The `gates` group: CI gates that turn the exit status non-zero (unset: no gate)."""

    min_success_rate: float | dict[str, float] | None = None  # a rate for overall, or {task or overall: rate}
    # e.g. {success_rate: -2pp, mean_reward: -0.05}, judged on the paired test (exact McNemar,
    # p < 0.05) against --agentcore-rl-compare
    max_regression: dict[str, str | float] | None = None

    def validate(self) -> None:
        rates = self.min_success_rate
        named = {"overall": rates} if isinstance(rates, float) else dict(rates or {})
        for subject, rate in named.items():
            if not 0.0 <= rate <= 1.0:
                key = "gates.min_success_rate" + ("" if isinstance(rates, float) else f".{subject}")
                raise ConfigError(f"{key}={rate} must be a rate between 0 and 1 (0.8 = 80%)")
        if self.max_regression:
            from .compare import REGRESSION_METRICS, parse_amount

            unknown = sorted(set(self.max_regression) - set(REGRESSION_METRICS))
            if unknown:
                raise ConfigError(
                    f"gates.max_regression: unknown metric(s) {unknown}; valid choices: "
                    f"{list(REGRESSION_METRICS)}"
                )
            for metric, amount in self.max_regression.items():
                try:
                    parse_amount(amount, metric=metric)
                except HarnessError as exc:
                    raise ConfigError(str(exc)) from exc
