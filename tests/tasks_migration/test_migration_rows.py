"""The migration pack's rows: seeded and committed as generated, MigrationBench-shaped, levels by
files to migrate, and every project is a real one (its tests pass as given and after the
reference migration, which removes every deprecated use)."""

from __future__ import annotations

import collections
import json
import subprocess
import sys

import pytest

from migration_harness import load_pack_module

checks = load_pack_module("migration_checks", "migration_checks.py")
check_file, deprecated_uses, parse = checks.check_file, checks.deprecated_uses, checks.parse
make_rows = load_pack_module("migration_projects", "migration_projects.py").make_rows
KINDS = load_pack_module("migration_templates", "migration_templates.py").KINDS

MIGRATIONBENCH_FIELDS = {"repo", "base_commit", "num_files", "num_loc", "num_test_files", "num_test_cases"}


def test_the_committed_rows_are_the_seeded_generators(pack_rows):
    generated = make_rows()
    committed = [row for level in (1, 2, 3) for row in pack_rows[level]]
    assert json.dumps(committed, sort_keys=True) == json.dumps(generated, sort_keys=True), \
        "regenerate: python tasks/migration/make_data.py"
    assert make_rows(seed=1) != generated


def test_levels_splits_and_shape(pack_rows):
    all_rows = [row for level in (1, 2, 3) for row in pack_rows[level]]
    assert len(all_rows) >= 60 and len({row["id"] for row in all_rows}) == len(all_rows)
    for level, rows in pack_rows.items():
        splits = collections.Counter(row["split"] for row in rows)
        assert splits["test"] >= 10 and splits["train"] >= 10
        for row in rows:
            assert MIGRATIONBENCH_FIELDS <= set(row) and row["level"] == level
            assert len(row["targets"]) == level == len({t["kind"] for t in row["targets"]})
            assert 2 <= row["num_files"] == len(row["files"]) <= 6
            assert set(row["migrated"]) == {t["path"] for t in row["targets"]}
            assert row["num_test_cases"] == sum(row["test_counts"].values())
            assert all(t["path"] in row["instruction"] for t in row["targets"])
            assert not any(source in row["instruction"] for source in row["migrated"].values())
    kinds = collections.Counter(t["kind"] for row in all_rows for t in row["targets"])
    assert set(kinds) == set(KINDS) and min(kinds.values()) >= 10


def test_each_target_holds_its_deprecation_and_the_reference_removes_it(pack_rows):
    for row in (row for rows in pack_rows.values() for row in rows):
        for target in row["targets"]:
            path, kind = target["path"], target["kind"]
            assert kind in {use.kind for use in deprecated_uses(parse(row["files"][path]))}
            assert not check_file(path, kind, row["files"][path], row["files"][path]).ok
            assert check_file(path, kind, row["migrated"][path], row["files"][path]).ok


def _run_tests(row, files, tmp_path):
    for path, text in files.items():
        (tmp_path / path).write_text(text)
    return subprocess.run([sys.executable, "-B", "-m", "unittest", *row["test_counts"]], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("variant", ["original", "migrated"])
def test_projects_pass_their_tests_before_and_after_migration(pack_rows, variant, tmp_path):
    # one row per level and every kind: `python tasks/migration/make_data.py --check` runs them all
    rows = [rows[-1] for rows in pack_rows.values()] + [pack_rows[1][i] for i in range(5)]
    assert {t["kind"] for row in rows for t in row["targets"]} == set(KINDS)
    for index, row in enumerate(rows):
        files = dict(row["files"])
        if variant == "migrated":
            files.update(row["migrated"])
        (tmp_path / str(index)).mkdir()
        done = _run_tests(row, files, tmp_path / str(index))
        assert done.returncode == 0 and f"Ran {row['num_test_cases']} tests" in done.stderr, done.stderr[-2000:]


def test_a_gutted_module_fails_its_own_tests(pack_rows, tmp_path):
    row = pack_rows[1][0]
    path = row["targets"][0]["path"]
    files = {**row["files"], path: "import argparse, importlib, asyncio\n"}
    assert _run_tests(row, files, tmp_path).returncode != 0
