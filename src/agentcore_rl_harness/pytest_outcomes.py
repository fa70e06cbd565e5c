"""The one place pytest meets the run core: outcome <-> verdict, the stash key, exit codes.

The run core (`run/`) knows items by id and raises its own exceptions; this module turns them
into pytest's: `ItemFailed` -> `pytest.fail` (no traceback), an item's report -> passed / why it
failed, the run's failure -> pytest's exit status, a task item's rollout -> `user_properties`.
"""

from __future__ import annotations

import pytest

from .errors import ERROR_TEXT_LIMIT, failure_text
from .records import Rollout
from .run.core import Run
from .run.scoring import ItemFailed

RUN_KEY = pytest.StashKey[Run]()
_PROPERTIES_SET = pytest.StashKey[bool]()


def run_of(config: pytest.Config) -> Run | None:
    """The run of this pytest session (None without --agentcore-rl)."""
    return config.stash.get(RUN_KEY, None)


def call_task(run: Run, item: pytest.Function) -> None:
    """Score a task item: its failure is pytest's failure, without a traceback."""
    arguments = {name: item.funcargs[name] for name in item._fixtureinfo.argnames}
    try:
        run.run_item(item.nodeid, item.function, arguments)
    except ItemFailed as exc:
        why = str(exc)
    else:
        return
    pytest.fail(why, pytrace=False)  # outside the except: no "During handling of ..." chain


def record_report(run: Run, item: pytest.Item, report: pytest.TestReport, call: pytest.CallInfo) -> None:
    """Record an item's rollout from its first deciding report (a failed phase, or the call),
    and put the rollout's reward, status and session on the item's `user_properties`."""
    if not report.skipped and not (report.passed and report.when != "call"):
        run.record_item(item.nodeid, passed=report.passed, error=error_text(call))
    rollout = run.recorded(item.nodeid)
    if rollout is not None and not item.stash.get(_PROPERTIES_SET, False):
        item.stash[_PROPERTIES_SET] = True
        properties = rollout_properties(rollout)
        item.user_properties.extend(properties)  # later reports (teardown) copy the item's
        report.user_properties.extend(properties)


def rollout_properties(rollout: Rollout) -> list[tuple[str, str]]:
    """What a user's own `--junitxml` (or any report plugin) gets from a task item's rollout."""
    properties = [
        ("reward", "" if rollout.reward is None else repr(rollout.reward)),
        ("status", rollout.status.value),
        ("session_id", rollout.session_id),
    ]
    properties += [(f"rewards.{name}", repr(value)) for name, value in rollout.rewards.items()]
    return properties


FAILURE_MESSAGE_CHARS = 160


def failure_line(nodeid: str, rollout: Rollout) -> str:
    """A failed rollout in one line: item, status, reward and its parts, the first line of why."""
    parts = [nodeid, rollout.status.value]
    if rollout.reward is not None:
        by_name = ", ".join(f"{name} {value:.3g}" for name, value in rollout.rewards.items())
        parts.append(f"reward {rollout.reward:.3g}" + (f" ({by_name})" if by_name else ""))
    why = next((line.strip() for line in (rollout.error or "").splitlines() if line.strip()), "")
    if len(why) > FAILURE_MESSAGE_CHARS:
        why = why[:FAILURE_MESSAGE_CHARS - 3] + "..."
    return " ".join(parts) + (f": {why}" if why else "")


def error_text(call: pytest.CallInfo) -> str | None:
    """Why an item failed, as its rollout record says it."""
    if call.excinfo is None:
        return None
    if call.excinfo.errisinstance(pytest.fail.Exception):  # pytest.fail("why"): the why is enough
        return call.excinfo.exconly()[:ERROR_TEXT_LIMIT]
    return failure_text(call.excinfo.value, summary=call.excinfo.exconly())


def exit_code(exitstatus: int, *, run_failed: bool) -> int:
    """A task's failed rollouts are data: exit 0 for them alone; a failed run (infrastructure
    error, gate) exits 1 even when every item passed."""
    if exitstatus == pytest.ExitCode.TESTS_FAILED and not run_failed:
        return pytest.ExitCode.OK
    if run_failed and exitstatus == pytest.ExitCode.OK:
        return pytest.ExitCode.TESTS_FAILED
    return exitstatus


def finish_session(run: Run, session: pytest.Session, exitstatus: int) -> int:
    """End the run; `--collect-only` writes no reports and keeps pytest's status."""
    if session.config.option.collectonly:
        run.finish(write_reports=False)
        return exitstatus
    interrupted = exitstatus == pytest.ExitCode.INTERRUPTED
    return exit_code(exitstatus, run_failed=run.finish(interrupted=interrupted))
