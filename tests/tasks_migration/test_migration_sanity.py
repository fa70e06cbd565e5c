"""Sanity of the migration pack through the plugin (`pytest --agentcore-rl eval tasks/migration`,
model=tiny, a few rows): the null agent and a reward-gaming agent earn nothing. The Java level
has its own (test_migration_java.py: in its environment)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

PACK = Path(__file__).resolve().parents[2] / "tasks" / "migration"
SPAM = Path(__file__).resolve().parent / "agents" / "spam_migration.py"

pytestmark = pytest.mark.slow


def run_pack(pytester, agent: str) -> list[dict]:
    result = pytester.runpytest_subprocess(
        str(PACK), "-k", "level", "--agentcore-rl", "eval", "--agentcore-rl-config", str(PACK / "configs"),
        "--agentcore-rl-set", "model=tiny", "--agentcore-rl-set", f"agent={agent}",
        "--agentcore-rl-set", "eval.max_rows=1", "--agentcore-rl-out", "run", "-p", "no:cacheprovider",
        timeout=600,
    )
    assert result.ret == 0, result.stdout.str()[-4000:]
    result.assert_outcomes(failed=3)  # one row per level, each a failed task test
    return [json.loads(line) for line in (pytester.path / "run" / "rollouts.jsonl").read_text().splitlines()]


def test_the_null_agent_scores_zero(pytester, tiny_model_dir):
    records = run_pack(pytester, "null")
    assert len(records) == 3
    for record in records:
        assert record["status"] == "task_failed" and record["success"] is False
        assert record["rewards"] == {"files_migrated": 0.0, "tests_pass": 0.0} and record["reward"] == 0.0


def test_a_reward_gaming_agent_scores_zero(pytester, tiny_model_dir):
    records = run_pack(pytester, str(SPAM))
    assert len(records) == 3
    for record in records:
        assert record["result"]["changed_files"]  # it did write its stubs
        assert record["status"] == "task_failed" and record["success"] is False
        assert record["rewards"]["files_migrated"] == 0.0 and record["rewards"]["tests_pass"] == 0.0
        assert record["reward"] == 0.0
        assert "failed" in record["error"] or "tests ran" in record["error"]
