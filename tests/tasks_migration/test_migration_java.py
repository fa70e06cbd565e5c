"""The Java level (Java 8 -> 17): its rows are the seeded generator's, its checks tell the
originals from the reference migrations, and in its Debian-built environment (Java 17, JUnit 4)
the oracle's script played through the real agent reaches every reward while the null agent and
a reward-gaming agent earn nothing - compiled and tested by plain javac/java in the sandbox."""

from __future__ import annotations

import asyncio
import collections
import json
from pathlib import Path

import pytest

from migration_harness import PACK, hermes_text, load_pack_module, play

java_projects = load_pack_module("java_projects", "java_projects.py")
SPAM = str(Path(__file__).resolve().parent / "agents" / "spam_java.py")


@pytest.fixture(scope="module")
def java_rows():
    return [json.loads(line) for line in (PACK / "data" / "java.jsonl").read_text().splitlines()]


def test_the_committed_rows_are_the_seeded_generators(java_rows):
    assert json.dumps(java_rows, sort_keys=True) == json.dumps(java_projects.make_java_rows(), sort_keys=True), \
        "regenerate: python tasks/migration/make_data.py"
    assert collections.Counter(row["split"] for row in java_rows) == {"train": 10, "test": 10}
    kinds = collections.Counter(t["kind"] for row in java_rows for t in row["targets"])
    assert set(kinds) == {"boxing", "thread_stop", "jaxb", "finalizer", "date"} and min(kinds.values()) >= 4
    for row in java_rows:
        assert row["language"] == "java" and row["num_test_cases"] == sum(row["test_counts"].values())
        assert all(path in row["files"] for path in row["migrated"]) and "run_tests.sh" in row["files"]


def test_the_checks_tell_an_original_from_its_migration(java_rows):
    for row in java_rows:
        for target in row["targets"]:
            original, migrated = row["files"][target["path"]], row["migrated"][target["path"]]
            before = java_projects.check_java_file(target["path"], target["kind"], original, original)
            after = java_projects.check_java_file(target["path"], target["kind"], migrated, original)
            assert not before.ok and any("deprecated" in p for p in before.problems), before
            assert after.ok, after


def test_the_checks_see_through_comments_strings_and_lost_methods():
    original = java_projects.JAVA_KINDS["boxing"].old.replace("${Noun}", "Item").replace("$domain", "d") \
        .replace("${noun}", "item").replace("${factor}", "3")
    hidden = original.replace("new Integer(text.trim())", "Integer.valueOf(text.trim()) /* new Integer( */") \
        .replace("new Long(value * 3L)", "Long.valueOf(value * 3L)").replace(
            "new Double((double) part / whole)", 'Double.valueOf("new Double(".length())')
    assert java_projects.check_java_file("X.java", "boxing", hidden, original).ok
    dropped = hidden.replace("public static Double ratio", "static Double ratio")
    assert java_projects.check_java_file("X.java", "boxing", dropped, original).problems == \
        ("public methods removed: ratio",)
    assert java_projects.check_java_file("X.java", "boxing", None, original).problems == \
        ("the file is missing or unreadable",)


@pytest.fixture(scope="module")
def java_task():
    return load_pack_module("migration_pack_tasks", "test_migration.py").test_migration_java


@pytest.mark.asyncio
async def test_the_oracle_through_the_agent_in_the_environment_passes(java_environment, java_rows, java_task, renderer, tasks):
    row = next(r for r in java_rows if r["split"] == "test" and len(r["targets"]) == 2
               and any(t["kind"] == "jaxb" for t in r["targets"]))  # a project that does not compile as given
    script = tasks.java_oracle_script(row)["_script"]
    played = await play(java_task, row, [hermes_text(turn) for turn in script], renderer)
    assert played.handle.status.value == "completed", played.handle.error
    assert played.rewards == {"files_migrated": 1.0, "tests_pass": 1.0}
    result = played.handle.result
    assert sorted(result["changed_files"]) == sorted(t["path"] for t in row["targets"])
    (trace,) = played.episode.traces
    assert trace.metadata["tool_calls"] == len(script) - 1 and trace.metadata["forks"] == 0


@pytest.mark.asyncio
@pytest.mark.parametrize("agent", ["null", SPAM], ids=["null", "spam"])
async def test_the_null_and_a_reward_gaming_agent_earn_nothing(agent, java_environment, java_rows, java_task, renderer):
    """Two rows at once: one that does not compile as given (javax.xml.bind), and one whose
    original compiles and passes its own tests (left as it is, it still earns nothing)."""
    rows = [next(r for r in java_rows if r["split"] == "test" and any(t["kind"] == "jaxb" for t in r["targets"])),
            next(r for r in java_rows if r["split"] == "test" and {t["kind"] for t in r["targets"]} == {"boxing"})]
    played = await asyncio.gather(*(play(java_task, row, [], renderer, agent=agent) for row in rows))
    for one in played:
        assert one.handle.status.value == "completed", one.handle.error
        assert one.rewards == {"files_migrated": 0.0, "tests_pass": 0.0}
