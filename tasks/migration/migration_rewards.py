"""The migration pack's rewards, computed from the files the session left in its sandbox.

The project's own tests run inside the session's sandbox (isolated like the session), from the
row's original test files put back first, so an agent that edits or deletes a test gains
nothing. They run under `python -I -B` through a runner the harness writes after the session
ended: the project directory goes at the END of `sys.path` (a planted `unittest.py` cannot
shadow the standard library), and the runner reports on a line marked with a nonce it reads from
stdin, so project code printing a fake report is not believed. The AST checks run here, on the
files read back (`migration_checks.py`).

Rewards, with partial credit:
- `files_migrated` (0.5): the share of the files to migrate that pass `check_file` AND whose
  own test module passes (a file emptied to lose its deprecated call fails its tests);
- `tests_pass` (0.5): every test module passes, counted only once some file was migrated (the
  untouched project passes its tests, so doing nothing must earn nothing).
"""

from __future__ import annotations

import json
import secrets
import sys
import weakref
from dataclasses import dataclass, field

import agentcore_rl_harness as arl
from agentcore_rl_harness.errors import SandboxError
from migration_checks import FileCheck, check_file
from migration_projects import PROJECT_DIR

RUNNER_PATH = ".migration_check/run_tests.py"
TEST_TIMEOUT_S = 120
MARK = "MIGRATION-TEST-REPORT"

RUNNER = '''import io, json, os, sys, unittest
nonce = sys.stdin.readline().strip()
project, modules = os.path.abspath(sys.argv[1]), sys.argv[2:]
sys.path.append(project)
os.chdir(project)
report = {}
for name in modules:
    stream = io.StringIO()
    try:
        suite = unittest.defaultTestLoader.loadTestsFromName(name)
        result = unittest.TextTestRunner(stream=stream, verbosity=1).run(suite)
    except BaseException as exc:
        report[name] = {"run": 0, "failed": 1, "log": repr(exc)[:800]}
        continue
    failed = len(result.failures) + len(result.errors) + len(result.skipped) + len(result.unexpectedSuccesses)
    report[name] = {"run": result.testsRun, "failed": failed, "log": stream.getvalue()[-800:]}
sys.stdout.write("\\n%s %s %s\\n" % (nonce, "''' + MARK + '''", json.dumps(report)))
sys.stdout.flush()
'''


@dataclass(frozen=True)
class ModuleResult:
    name: str
    passed: bool
    detail: str


@dataclass(frozen=True)
class Evaluation:
    """Everything the rewards and the test body need, from one look at the sandbox."""

    files: tuple[FileCheck, ...]
    tests: tuple[ModuleResult, ...]
    migrated: tuple[str, ...] = field(default=())  # paths that pass every check and their tests

    @property
    def all_tests_pass(self) -> bool:
        return bool(self.tests) and all(result.passed for result in self.tests)

    def problems(self) -> list[str]:
        found = [f"{check.path}: {problem}" for check in self.files for problem in check.problems]
        found += [f"{result.name}: {result.detail}" for result in self.tests if not result.passed]
        return found


_EVALUATIONS: "weakref.WeakKeyDictionary[object, Evaluation]" = weakref.WeakKeyDictionary()


async def read_source(sandbox, path: str) -> str | None:
    """The project file `path` as the agent left it; None when it is gone or not UTF-8 text."""
    try:
        return (await sandbox.get_file(f"{PROJECT_DIR}/{path}", max_bytes=1 << 20)).decode("utf-8")
    except (SandboxError, UnicodeDecodeError):
        return None


def _sandbox(rollout) -> arl.Sandbox:
    backend = getattr(getattr(rollout, "episode", None), "sandbox", None)
    if backend is None:
        raise RuntimeError(
            "the migration rewards read the session's final files, and this rollout has none: "
            "declare the task with @arl.task(..., sandbox=True) and run it on runtime=local")
    return arl.Sandbox(backend)


def _parse_report(stdout: str, nonce: str, expected: dict[str, int]) -> tuple[ModuleResult, ...]:
    lines = [line for line in stdout.splitlines() if line.startswith(f"{nonce} {MARK} ")]
    if not lines:
        return tuple(ModuleResult(name, False, "the test run gave no report (crashed or timed out)")
                     for name in expected)
    report = json.loads(lines[-1].split(" ", 2)[2])
    results = []
    for name, count in expected.items():
        entry = report.get(name, {})
        run, failed = entry.get("run", 0), entry.get("failed", 1)
        passed = failed == 0 and run == count
        detail = "ok" if passed else f"{run} of {count} tests ran, {failed} failed: {entry.get('log', '')[-300:]}"
        results.append(ModuleResult(name, passed, detail))
    return tuple(results)


async def run_checks(sandbox: arl.Sandbox, row: dict) -> Evaluation:
    """Put the original tests back, run every test module, and check each file to migrate."""
    for path, text in row["files"].items():
        if path.rsplit("/", 1)[-1].startswith("test_"):
            await sandbox.put_file(f"{PROJECT_DIR}/{path}", text)
    await sandbox.put_file(RUNNER_PATH, RUNNER)
    nonce = secrets.token_hex(16)
    expected = dict(row["test_counts"])
    result = await sandbox.exec([sys.executable, "-I", "-B", RUNNER_PATH, PROJECT_DIR, *expected],
                                timeout=TEST_TIMEOUT_S, stdin=(nonce + "\n").encode())
    tests = _parse_report(result.stdout, nonce, expected)
    passed_modules = {module.name for module in tests if module.passed}
    checks, migrated = [], []
    for target in row["targets"]:
        path = target["path"]
        source = await read_source(sandbox, path)
        check = check_file(path, target["kind"], source, row["files"][path])
        checks.append(check)
        if check.ok and f"test_{path[:-3]}" in passed_modules:
            migrated.append(path)
    return Evaluation(files=tuple(checks), tests=tests, migrated=tuple(migrated))


async def evaluation(rollout, row) -> Evaluation:
    """The rollout's evaluation, computed once and shared by the rewards and the test body."""
    found = _EVALUATIONS.get(rollout)
    if found is None:
        found = _EVALUATIONS[rollout] = await run_checks(_sandbox(rollout), row)
    return found


def evaluated(rollout) -> Evaluation | None:
    return _EVALUATIONS.get(rollout)


@arl.reward(weight=0.5)
async def files_migrated(rollout, row) -> float:
    checked = await evaluation(rollout, row)
    return len(checked.migrated) / len(row["targets"])


@arl.reward(weight=0.5)
async def tests_pass(rollout, row) -> float:
    checked = await evaluation(rollout, row)
    return float(checked.all_tests_pass and bool(checked.migrated))
