"""`pytest tasks` stays the bundled arithmetic suite (the main job); a pack runs when named."""

from __future__ import annotations

import pytest
from office_pack import PACK

pytestmark = pytest.mark.slow  # pytest subprocesses
TASKS = PACK.parent


def collected(pytester, *args):
    result = pytester.runpytest_subprocess("--collect-only", "-q", "-p", "no:cacheprovider", *args, timeout=300)
    assert result.ret == 0, result.stdout.str()[-2000:]
    return [line for line in result.stdout.lines if "::" in line]


def test_the_tasks_folder_collects_the_bundled_task_and_not_the_packs(pytester):
    items = collected(pytester, str(TASKS))
    assert items and all("test_arith.py" in item for item in items)


def test_a_named_pack_or_one_of_its_tests_is_collected(pytester):
    names = {item.split("::")[1].split("[")[0] for item in collected(pytester, str(PACK))}
    assert names == {"test_office_level1", "test_office_level2", "test_office_level3",
                     "test_office_level1m", "test_office_mcp"}
    one = collected(pytester, f"{PACK / 'test_office.py'}::test_office_level2")
    assert one and all(item.split("::")[1].startswith("test_office_level2[") for item in one)
