"""docs/mcp.md's example is the code: its task declares the server the page describes, its
`McpServer` field list is the dataclass's, and (slow) its server, Strands agent and task run
as printed: the oracle's reference episode through the agent and the MCP server reaches 100%
(the null and spam agents scoring 0 on an MCP task are tests/tasks_office/test_office_mcp.py's)."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from doc_blocks import DOCS, blocks, files

from agentcore_rl_harness import McpServer
from agentcore_rl_harness.tasks import task_spec

PAGE = DOCS / "mcp.md"
FILES = ("notes_server.py", "test_notes.py", "data/notes.jsonl", "notes_agent.py")


@pytest.fixture
def project(tmp_path):
    for path, text in files(PAGE).items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    return tmp_path


def test_the_pages_task_declares_the_server_its_fields_are_the_dataclass(project):
    assert sorted(files(PAGE)) == sorted(FILES)
    spec = importlib.util.spec_from_file_location("docs_test_notes", project / "test_notes.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    (server,) = task_spec(module.test_notes).mcp_servers
    assert server == McpServer(name="notes", transport="http",
                               command=("{python}", f"{project}/notes_server.py", "--port", "{port}"))
    text = PAGE.read_text()
    listed = re.findall(r"^- `(\w+)`:", text.split("`arl.McpServer` fields:", 1)[1].split("\n\n", 2)[1], re.M)
    assert listed == [field.name for field in dataclasses.fields(McpServer)]
    for block in blocks(PAGE):
        if block.lang == "python":
            compile(block.text, f"{PAGE.name}:{block.line}", "exec")
    commands = _commands()
    assert [c.split("agent=")[1].split()[0] for c in commands] == ["oracle", "null"]
    assert all(c.startswith("pytest --agentcore-rl eval ") for c in commands)


def _commands() -> list[str]:
    return [line for block in blocks(PAGE) if block.runs for line in block.text.splitlines() if line.strip()]


@pytest.mark.slow
def test_the_pages_example_runs_as_printed(project, tiny_model_dir):
    (command,) = [c for c in _commands() if "agent=oracle" in c]
    args = command.split()[1:] + [arg for override in ("model=tiny", "report.progress=off", "eval.max_rows=1")
                                  for arg in ("--agentcore-rl-set", override)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args, "--agentcore-rl-out",
                           "out"], cwd=project, env=env, capture_output=True, text=True, timeout=600)
    records = [json.loads(line) for line in (project / "out" / "rollouts.jsonl").read_text().splitlines()]
    assert len(records) == 1, done.stdout[-3000:]
    for record in records:
        assert record["status"] == "completed" and record["reward"] == 1.0, (record["error"], done.stdout[-3000:])
        assert record["turns"] == 2  # the tool call through the MCP server, then the answer
    assert done.returncode == 0, done.stdout[-3000:]
