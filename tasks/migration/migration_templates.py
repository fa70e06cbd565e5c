"""The module templates of the migration pack: one per deprecated API, each in its old and its
migrated form, with a unittest module that passes on both.

Templates use `string.Template` (`$name`), so the generated code keeps its own braces. Every
kind names the documented replacement its migration must use (see `migration_checks.py`).
"""

from __future__ import annotations

from dataclasses import dataclass
from string import Template


@dataclass(frozen=True)
class Kind:
    """One deprecated API: the module it lives in, its old and new source, and its tests."""

    name: str  # the deprecation, as migration_checks.py names it
    module: str  # the project file, without .py
    old: str
    new: str
    tests: str
    test_count: int
    hint: str  # the documented replacement, as the instruction states it


OPTPARSE_OLD = '''"""Command line of the $domain tool."""

from optparse import OptionParser


def build_parser():
    parser = OptionParser(usage="%prog [options] NAME...")
    parser.add_option("--$opt", dest="$opt", type="int", default=$default,
                      help="how many ${noun}s to show")
    parser.add_option("-v", "--verbose", dest="verbose", action="store_true", default=False,
                      help="print more")
    return parser


def parse(argv):
    """Options and positional names as a plain dict."""
    options, names = build_parser().parse_args(argv)
    return {"$opt": options.$opt, "verbose": options.verbose, "names": list(names)}
'''

OPTPARSE_NEW = '''"""Command line of the $domain tool."""

from argparse import ArgumentParser


def build_parser():
    parser = ArgumentParser(usage="%(prog)s [options] NAME...")
    parser.add_argument("--$opt", dest="$opt", type=int, default=$default,
                        help="how many ${noun}s to show")
    parser.add_argument("-v", "--verbose", dest="verbose", action="store_true", default=False,
                        help="print more")
    parser.add_argument("names", nargs="*")
    return parser


def parse(argv):
    """Options and positional names as a plain dict."""
    args = build_parser().parse_args(argv)
    return {"$opt": args.$opt, "verbose": args.verbose, "names": list(args.names)}
'''

OPTPARSE_TESTS = '''import contextlib
import io
import unittest

from cli import parse


class ParseTest(unittest.TestCase):
    def test_defaults(self):
        self.assertEqual(parse([]), {"$opt": $default, "verbose": False, "names": []})

    def test_options_and_names(self):
        self.assertEqual(parse(["--$opt", "$number", "-v", "$name1", "$name2"]),
                         {"$opt": $number, "verbose": True, "names": ["$name1", "$name2"]})

    def test_a_bad_number_is_a_usage_error(self):
        with contextlib.redirect_stderr(io.StringIO()), self.assertRaises(SystemExit):
            parse(["--$opt", "many"])


if __name__ == "__main__":
    unittest.main()
'''

UTCNOW_OLD = '''"""Timestamps of $domain ${noun}s, in UTC."""

import datetime


def expires_at(ttl_seconds):
    """When a $noun made now expires."""
    return datetime.datetime.utcnow() + datetime.timedelta(seconds=ttl_seconds)


def is_expired(expiry):
    return datetime.datetime.utcnow() >= expiry


def from_epoch(seconds):
    return datetime.datetime.utcfromtimestamp(seconds)


def stamp(label):
    """`label@YYYY-mm-ddTHH:MM`, in UTC."""
    return "%s@%s" % (label, datetime.datetime.utcnow().strftime("%Y-%m-%dT%H:%M"))
'''

UTCNOW_NEW = '''"""Timestamps of $domain ${noun}s, in UTC."""

import datetime


def expires_at(ttl_seconds):
    """When a $noun made now expires."""
    return datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=ttl_seconds)


def is_expired(expiry):
    return datetime.datetime.now(datetime.timezone.utc) >= expiry


def from_epoch(seconds):
    return datetime.datetime.fromtimestamp(seconds, tz=datetime.timezone.utc)


def stamp(label):
    """`label@YYYY-mm-ddTHH:MM`, in UTC."""
    now = datetime.datetime.now(datetime.timezone.utc)
    return "%s@%s" % (label, now.strftime("%Y-%m-%dT%H:%M"))
'''

UTCNOW_TESTS = '''import time
import unittest

from clock import expires_at, from_epoch, is_expired, stamp


class ClockTest(unittest.TestCase):
    def test_expiry(self):
        self.assertTrue(is_expired(expires_at(-$past)))
        self.assertFalse(is_expired(expires_at($ttl)))

    def test_expiry_is_ttl_from_now(self):
        delta = expires_at($ttl) - expires_at(0)
        self.assertAlmostEqual(delta.total_seconds(), $ttl, delta=5)

    def test_from_epoch_is_utc(self):
        moment = from_epoch($epoch)
        self.assertEqual((moment.year, moment.month, moment.day, moment.hour),
                         time.gmtime($epoch)[:4])

    def test_stamp_is_utc(self):
        text = stamp("$label")
        self.assertRegex(text, r"^$label@[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}$$")
        self.assertEqual(int(text.split("@")[1][:4]), time.gmtime().tm_year)


if __name__ == "__main__":
    unittest.main()
'''

IMP_OLD = '''"""Loads $domain plugins from their files."""

import imp
import os


def load_plugin(path):
    """Import the Python file at `path` as a module named after the file."""
    name = os.path.splitext(os.path.basename(path))[0]
    return imp.load_source(name, path)


def find_plugin(name, directory):
    """The file of plugin `name` in `directory`; ImportError if there is none."""
    handle, pathname, _ = imp.find_module(name, [directory])
    if handle is not None:
        handle.close()
    return pathname
'''

IMP_NEW = '''"""Loads $domain plugins from their files."""

import importlib.machinery
import importlib.util
import os


def load_plugin(path):
    """Import the Python file at `path` as a module named after the file."""
    name = os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def find_plugin(name, directory):
    """The file of plugin `name` in `directory`; ImportError if there is none."""
    spec = importlib.machinery.PathFinder.find_spec(name, [directory])
    if spec is None:
        raise ImportError(f"no plugin {name!r} in {directory}")
    return spec.origin
'''

IMP_TESTS = '''import os
import tempfile
import unittest

from loader import find_plugin, load_plugin


class LoaderTest(unittest.TestCase):
    def setUp(self):
        self.path = os.path.join(tempfile.mkdtemp(), "$plugin.py")
        with open(self.path, "w") as out:
            out.write("VALUE = $value\\n\\n\\ndef run(x):\\n    return x * VALUE\\n")

    def test_load(self):
        module = load_plugin(self.path)
        self.assertEqual(module.__name__, "$plugin")
        self.assertEqual(module.run(3), 3 * $value)

    def test_find(self):
        directory = os.path.dirname(self.path)
        self.assertEqual(find_plugin("$plugin", directory), self.path)
        with self.assertRaises(ImportError):
            find_plugin("no_$plugin", directory)


if __name__ == "__main__":
    unittest.main()
'''

TYPING_OLD = '''"""$Domain records: grouping and lookups."""

from typing import Dict, List, Optional, Tuple


def group_by_$key(rows: List[Tuple[str, int]]) -> Dict[str, List[int]]:
    groups: Dict[str, List[int]] = {}
    for name, value in rows:
        groups.setdefault(name, []).append(value)
    return groups


def find_$noun(names: List[str], prefix: str) -> Optional[str]:
    for name in names:
        if name.startswith(prefix):
            return name
    return None


def totals(groups: Dict[str, List[int]]) -> List[Tuple[str, int]]:
    return sorted((name, sum(values)) for name, values in groups.items())
'''

TYPING_NEW = '''"""$Domain records: grouping and lookups."""


def group_by_$key(rows: list[tuple[str, int]]) -> dict[str, list[int]]:
    groups: dict[str, list[int]] = {}
    for name, value in rows:
        groups.setdefault(name, []).append(value)
    return groups


def find_$noun(names: list[str], prefix: str) -> str | None:
    for name in names:
        if name.startswith(prefix):
            return name
    return None


def totals(groups: dict[str, list[int]]) -> list[tuple[str, int]]:
    return sorted((name, sum(values)) for name, values in groups.items())
'''

TYPING_TESTS = '''import typing
import unittest

from records import find_$noun, group_by_$key, totals


class RecordsTest(unittest.TestCase):
    def test_group_and_total(self):
        groups = group_by_$key([("$name1", $a), ("$name2", $b), ("$name1", $c)])
        self.assertEqual(groups, {"$name1": [$a, $c], "$name2": [$b]})
        self.assertEqual(totals(groups), sorted([("$name1", $a + $c), ("$name2", $b)]))

    def test_find(self):
        self.assertEqual(find_$noun(["$name1", "$name2"], "$prefix"), "$name2")
        self.assertIsNone(find_$noun(["$name1"], "zz"))

    def test_annotations_resolve(self):
        for function in (find_$noun, group_by_$key, totals):
            self.assertIn("return", typing.get_type_hints(function))


if __name__ == "__main__":
    unittest.main()
'''

ASYNCIO_OLD = '''"""Runs $domain jobs concurrently."""

import asyncio


async def _work(value):
    await asyncio.sleep(0)
    return value * $factor


def run_all(values):
    loop = asyncio.get_event_loop()
    return loop.run_until_complete(asyncio.gather(*(_work(v) for v in values)))


def run_one(value):
    return asyncio.get_event_loop().run_until_complete(_work(value))
'''

ASYNCIO_NEW = '''"""Runs $domain jobs concurrently."""

import asyncio


async def _work(value):
    await asyncio.sleep(0)
    return value * $factor


async def _gather(values):
    return await asyncio.gather(*(_work(v) for v in values))


def run_all(values):
    return list(asyncio.run(_gather(values)))


def run_one(value):
    return asyncio.run(_work(value))
'''

ASYNCIO_TESTS = '''import unittest

from jobs import run_all, run_one


class JobsTest(unittest.TestCase):
    def test_run_all_keeps_order(self):
        self.assertEqual(run_all([$a, $b, $c]), [$a * $factor, $b * $factor, $c * $factor])

    def test_run_one_twice(self):
        self.assertEqual(run_one($a), $a * $factor)
        self.assertEqual(run_one($b), $b * $factor)


if __name__ == "__main__":
    unittest.main()
'''

HELPER = '''"""Plain helpers of the $domain project."""


def normalise(name):
    return " ".join(name.split()).lower()


def label(count):
    return "%d $noun%s" % (count, "" if count == 1 else "s")
'''

HELPER_TESTS = '''import unittest

from $domain import label, normalise


class HelpersTest(unittest.TestCase):
    def test_normalise(self):
        self.assertEqual(normalise("  $Name1  X "), "$name1 x")

    def test_label(self):
        self.assertEqual(label(1), "1 $noun")
        self.assertEqual(label($a), "$a ${noun}s")


if __name__ == "__main__":
    unittest.main()
'''

KINDS = {
    kind.name: kind
    for kind in (
        Kind("optparse", "cli", OPTPARSE_OLD, OPTPARSE_NEW, OPTPARSE_TESTS, 3,
             "optparse -> argparse (ArgumentParser, add_argument, a positional with nargs='*')"),
        Kind("utcnow", "clock", UTCNOW_OLD, UTCNOW_NEW, UTCNOW_TESTS, 4,
             "datetime.utcnow() / utcfromtimestamp() -> timezone-aware "
             "datetime.now(timezone.utc) / fromtimestamp(ts, tz=timezone.utc)"),
        Kind("imp", "loader", IMP_OLD, IMP_NEW, IMP_TESTS, 2,
             "imp -> importlib (importlib.util.spec_from_file_location, module_from_spec, "
             "exec_module; importlib.machinery.PathFinder.find_spec)"),
        Kind("typing_aliases", "records", TYPING_OLD, TYPING_NEW, TYPING_TESTS, 3,
             "typing.List / Dict / Tuple / Optional -> list / dict / tuple / X | None"),
        Kind("get_event_loop", "jobs", ASYNCIO_OLD, ASYNCIO_NEW, ASYNCIO_TESTS, 2,
             "asyncio.get_event_loop().run_until_complete(...) -> asyncio.run(...)"),
    )
}


def render(template: str, params: dict[str, str]) -> str:
    return Template(template).substitute(params)
