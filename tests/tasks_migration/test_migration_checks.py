"""The AST checks of the migration pack: each deprecated use is found however it is spelled, the
replacement must be in use, and public functions must survive."""

from __future__ import annotations

import pytest

from migration_harness import load_pack_module

checks = load_pack_module("migration_checks", "migration_checks.py")
check_file, deprecated_uses, parse, uses_replacement = (
    checks.check_file, checks.deprecated_uses, checks.parse, checks.uses_replacement)


def kinds(source: str) -> list[str]:
    return [use.kind for use in deprecated_uses(parse(source))]


@pytest.mark.parametrize("source, expected", [
    ("import optparse", ["optparse"]),
    ("from optparse import OptionParser as P", ["optparse"]),
    ("import imp", ["imp"]),
    ("x = __import__('imp')", ["imp"]),
    ("import importlib\nm = importlib.import_module('optparse')", ["optparse"]),
    ("import datetime\nnow = datetime.datetime.utcnow()", ["utcnow"]),
    ("from datetime import datetime\nt = datetime.utcfromtimestamp(0)", ["utcnow"]),
    ("import datetime\nf = getattr(datetime.datetime, 'utcnow')", ["utcnow"]),
    ("from typing import List\nx: List[int] = []", ["typing_aliases"]),
    ("import typing as t\nx: t.Optional[int] = None", ["typing_aliases"]),
    ("import typing\nx: typing.Dict[str, int] = {}", ["typing_aliases"]),
    ("import asyncio\nloop = asyncio.get_event_loop()", ["get_event_loop"]),
    ("from asyncio import get_event_loop", ["get_event_loop"]),
])
def test_deprecated_uses_are_found(source, expected):
    assert kinds(source) == expected


@pytest.mark.parametrize("source", [
    "import argparse",
    "import importlib.util",
    "import datetime\nnow = datetime.datetime.now(datetime.timezone.utc)",
    "from typing import Any, Callable, Protocol\nx: list[int] | None = None",
    "import asyncio\nasyncio.run(asyncio.sleep(0))\nloop = asyncio.get_running_loop",
    "# import optparse\ntext = 'datetime.utcnow()'",
])
def test_modern_code_is_clean(source):
    assert kinds(source) == []


@pytest.mark.parametrize("kind, with_it, without_it", [
    ("optparse", "import argparse", "import sys"),
    ("imp", "import importlib.util", "import os"),
    ("utcnow", "import datetime\nx = datetime.timezone.utc", "import datetime\nx = datetime.datetime.now()"),
    ("utcnow", "from datetime import UTC", "import time"),
    ("get_event_loop", "import asyncio\nasyncio.run(f())", "import asyncio\nasyncio.new_event_loop()"),
])
def test_the_replacement_must_be_used(kind, with_it, without_it):
    assert uses_replacement(kind, parse(with_it)) and not uses_replacement(kind, parse(without_it))


ORIGINAL = "from optparse import OptionParser\n\n\ndef build_parser():\n    pass\n\n\ndef parse(argv):\n    pass\n"


def test_check_file_verdicts():
    assert check_file("cli.py", "optparse", None, ORIGINAL).problems == ("the file is missing",)
    assert check_file("cli.py", "optparse", "def (:", ORIGINAL).problems == ("the file is not valid Python",)
    assert check_file("cli.py", "optparse", "(" * 10000, ORIGINAL).problems == ("the file is not valid Python",)
    verdict = check_file("cli.py", "optparse", ORIGINAL, ORIGINAL)
    assert not verdict.ok and "deprecated use left: line 1: import optparse (optparse)" in verdict.problems
    lost = check_file("cli.py", "optparse", "import argparse\n\n\ndef parse(argv):\n    pass\n", ORIGINAL)
    assert lost.problems == ("public functions removed: build_parser",)
    kept = check_file("cli.py", "optparse", ORIGINAL.replace("from optparse import OptionParser", "import argparse"),
                      ORIGINAL)
    assert kept.ok
