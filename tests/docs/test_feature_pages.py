"""The snippets of the pages on judged rewards, per-task limits and the hosted baseline are what
the code accepts: every `--agentcore-rl-set` command composes, the config file composes, the
Python declares the tasks it says, and the tables list the real keys. Fast: no model, no run."""

from __future__ import annotations

import dataclasses
import json
import re
import shlex

import pytest
from doc_blocks import DOCS, blocks

import agentcore_rl_harness as arl
from agentcore_rl_harness.config import compose_config
from agentcore_rl_harness.judged import JudgeReward
from agentcore_rl_harness.judges.config import JudgeConfig
from agentcore_rl_harness.reports.model import RoleUsage
from agentcore_rl_harness.samplers.hosted import HostedSettings
from agentcore_rl_harness.tasks import task_spec

PAGES = ("judges.md", "tasks.md", "reports.md", "troubleshooting.md")


def _commands(page: str) -> list[tuple[int, list[str]]]:
    """(line, the --agentcore-rl-set overrides) of each pytest command in the page's bash blocks."""
    found = []
    for block in blocks(DOCS / page):
        if block.lang not in ("bash", "sh"):
            continue
        for command in block.text.replace("\\\n", " ").splitlines():
            if command.strip().startswith("pytest --agentcore-rl"):
                words = shlex.split(command, comments=True)
                found.append((block.line, [words[i + 1] for i, w in enumerate(words) if w == "--agentcore-rl-set"]))
    return found


COMMANDS = [(page, line, overrides) for page in PAGES for line, overrides in _commands(page) if overrides]


def test_the_pages_have_the_commands_this_test_checks():
    assert {page for page, _, _ in COMMANDS} >= {"judges.md", "reports.md"}
    assert sum(1 for page, _, _ in COMMANDS if page == "judges.md") == 5  # one per judge kind, vLLM too


@pytest.mark.parametrize("page, line, overrides", COMMANDS, ids=[f"{p}:{n}" for p, n, _ in COMMANDS])
def test_every_documented_command_composes(page, line, overrides):
    typed = compose_config(overrides).typed
    typed.roles.validate()
    if "sampler=hosted" in overrides:
        typed.sampler.hosted.validate()


def test_the_config_file_on_the_judges_page_composes(tmp_path):
    (text,) = [b.text for b in blocks(DOCS / "judges.md") if b.title == "configs/config.yaml"]
    (tmp_path / "config.yaml").write_text(text)
    judge = compose_config(source=tmp_path).typed.roles.judge
    assert (judge.kind, judge.model, judge.concurrency, judge.price.completion_per_mtok) == ("openai", "gpt-4o-mini", 8, 0.6)


def _python(page: str) -> list[str]:
    return [b.text for b in blocks(DOCS / page) if b.lang == "python"]


def test_the_judged_reward_examples_declare_what_the_page_says():
    task_file, group_example = _python("judges.md")
    scope: dict = {}
    exec(compile(task_file, "judges.md", "exec"), scope)
    spec = task_spec(scope["test_support"])
    assert [(r.name, r.weight, r.group) for r in spec.rewards] == [("helpful", 1.0, False), ("plan_quality", 0.5, False)]
    transcript = spec.rewards[1].transcript(type("R", (), {"result": {"plan": "1. ask"}})(), {"question": "why?"})
    assert "why?" in transcript and "1. ask" in transcript
    exec(compile(group_example, "judges.md", "exec"), {"arl": arl}, scope)
    assert isinstance(scope["ranked"], JudgeReward) and scope["ranked"].group and scope["ranked"].name == "ranked"


def test_the_limits_example_declares_the_limits():
    (example,) = [text for text in _python("tasks.md") if "limits=" in text]
    scope: dict = {"arl": arl}
    exec(compile(example, "tasks.md", "exec"), scope)
    limits = task_spec(scope["test_support"]).limits
    assert limits.set() == {"max_turns": 8, "max_tokens": 2000, "max_tool_calls": 5, "timeout_s": 60.0}


def _table_keys(page: str, prefix: str = "") -> list[str]:
    return [prefix + key for key in re.findall(r"^\| `([a-z_.]+)` \|", (DOCS / page).read_text(), re.MULTILINE)]


def _fields(node, prefix="") -> list[str]:
    names = []
    for field in dataclasses.fields(node):
        value = getattr(node, field.name)
        names += _fields(value, f"{prefix}{field.name}.") if dataclasses.is_dataclass(value) else [prefix + field.name]
    return names


def test_the_key_tables_list_exactly_the_real_keys():
    assert _table_keys("judges.md") == _fields(JudgeConfig())
    hosted = [key for key in _table_keys("reports.md") if key.startswith("sampler.hosted.")]
    assert hosted == _fields(HostedSettings(), "sampler.hosted.")
    limits = [key for key in re.findall(r"^\| `([a-z_]+)` \| (?:model|tokens|tool|the episode)",
                                        (DOCS / "tasks.md").read_text(), re.MULTILINE)]
    assert limits == ["max_turns", "max_tokens", "max_tool_calls", "timeout_s"]


def test_the_usage_example_has_the_report_fields():
    page = (DOCS / "judges.md").read_text()
    (example,) = [b.text for b in blocks(DOCS / "judges.md") if b.lang == "json"]
    roles = json.loads("{" + example + "}")["roles"]
    for usage in roles.values():
        assert RoleUsage.model_validate(usage) and set(usage) == set(RoleUsage.model_fields)
    assert "Usage by role" in page
