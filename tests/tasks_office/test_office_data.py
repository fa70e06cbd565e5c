"""The office pack's data, tools and reward, in-process: the generator's rows, every row's script
played against the agent's real tools in a tmp directory, and the checks on hand-made end states."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from office_pack import PACK, load, rows

agent = load("agent")
checks = load("office_checks")
make = load("make_office")
ALL_ROWS = [row for level in (1, 2, 3) for row in rows(level)]


def test_the_committed_data_is_what_the_seeded_generator_makes():
    made = make.make_rows()
    for level in (1, 2, 3):
        expected = "".join(json.dumps(r) + "\n" for r in made if r["level"] == level)
        assert (PACK / "data" / f"office-l{level}.jsonl").read_text() == expected, (
            "run python tasks/office/make_office.py")
    assert make.make_rows(seed=1) != made


def test_script_arguments_come_in_the_tools_own_order():
    """A demonstration teaches the argument order it shows: the worked example in the prompt and
    the tool's schema say send_email(to, subject, body), so the oracle's turns must too (sorted
    keys had taught body, subject, to)."""
    order = {tool.name: list(tool.args) for tool in agent.TOOLS}
    for row in ALL_ROWS + rows("1m"):
        for turn in row["script"]:
            for call in turn.get("tool_calls", []):
                names = list(call["arguments"])
                assert names == [name for name in order[call["name"]] if name in names], (row["id"], call)


def test_at_least_150_rows_with_train_and_test_splits_per_level():
    assert len(ALL_ROWS) >= 150
    counts = Counter((row["level"], row["split"]) for row in ALL_ROWS)
    assert all(counts[(level, "test")] >= 20 and counts[(level, "train")] >= 20 for level in (1, 2, 3))
    assert len({row["id"] for row in ALL_ROWS}) == len(ALL_ROWS)
    cases = {(row["task"], json.dumps(row["files"], sort_keys=True), json.dumps(row["tables"])) for row in ALL_ROWS}
    assert len(cases) == len(ALL_ROWS), "each row is a distinct case (instruction and files)"


def test_levels_count_the_apps_a_task_needs():
    for row in ALL_ROWS:
        assert len(row["apps"]) == row["level"], row["id"]


def test_level_1_needs_three_tool_calls_over_two_tools_and_the_file_must_be_found():
    for row in rows(1):
        calls = [call for turn in row["script"] for call in turn.get("tool_calls", [])]
        assert len(calls) >= 3 and len({call["name"] for call in calls}) >= 2, row["id"]
        assert calls[0]["name"] == "ls" and calls[1]["name"] == "read"
        read_path = calls[1]["arguments"]["path"]
        assert read_path not in row["task"], "the file to read must be found with ls, not given"
        assert len(json.dumps(row["files"])) < 2500, "level-1 files stay small"


def apply_script(row, workdir, monkeypatch):
    """Seed the files as the agent does, run the script's tool calls with the real tools, and
    return the end state (path -> bytes) and the tool results."""
    monkeypatch.chdir(workdir)
    agent.seed(row["files"], row["tables"])
    tools = {tool.name: tool for tool in agent.TOOLS}
    results = [tools[call["name"]].invoke(call["arguments"])
               for turn in row["script"] for call in turn.get("tool_calls", [])]
    state = {str(p.relative_to(workdir)): p.read_bytes() for p in workdir.rglob("*") if p.is_file()}
    return state, results


@pytest.mark.parametrize("row", ALL_ROWS, ids=lambda row: row["id"])
def test_every_rows_script_reaches_every_check_with_the_real_tools(row, tmp_path, monkeypatch):
    state, results = apply_script(row, tmp_path, monkeypatch)
    assert not [r for r in results if r.startswith("error")], results
    score = checks.score(row, state)
    assert score.guard_failures == [] and all(score.checks.values()), score
    assert score.reward == 1.0 and score.success
    # the value the script had to look up was shown by the tool that read it
    assert row["script"][-1].get("content")


@pytest.mark.parametrize("level", [1, 2, 3])
def test_a_session_that_only_seeds_its_files_passes_no_check(level, tmp_path, monkeypatch):
    for row in rows(level):
        workdir = tmp_path / row["id"]
        workdir.mkdir()
        monkeypatch.chdir(workdir)
        agent.seed(row["files"], row["tables"])
        state = {str(p.relative_to(workdir)): p.read_bytes() for p in workdir.rglob("*") if p.is_file()}
        score = checks.score(row, state)
        assert not any(score.checks.values()) and score.reward == 0.0, (row["id"], score)


def test_nothing_done_scores_zero_and_partial_work_gets_partial_credit(tmp_path, monkeypatch):
    row = next(r for r in rows(2) if r["template"] == "doc_to_mail")
    monkeypatch.chdir(tmp_path)
    agent.seed(row["files"], row["tables"])
    seeded = {str(p.relative_to(tmp_path)): p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    assert checks.score(row, seeded).reward == 0.0
    to = row["guards"]["recipients"][0]
    agent.send_email.invoke({"to": to, "subject": "Agenda", "body": "see you"})
    state = {str(p.relative_to(tmp_path)): p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    score = checks.score(row, state)
    assert 0 < score.reward < 1 and not score.success  # right person and subject, no agenda items
    assert score.reward == pytest.approx(2 / 5)


def test_guards_zero_the_reward_of_spam_and_collateral_damage(tmp_path, monkeypatch):
    row = next(r for r in rows(1) if r["template"] == "mail_forward" and r["guards"]["forbidden"])
    state, _ = apply_script(row, tmp_path, monkeypatch)
    assert checks.score(row, state).reward == 1.0
    agent.send_email.invoke({"to": "zed@example.com", "subject": "x", "body": "hi"})
    with_spam = {str(p.relative_to(tmp_path)): p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    score = checks.score(row, with_spam)
    assert score.reward == 0.0 and "zed@example.com" in score.guard_failures[0]
    leak = dict(state)
    leak["mail/sent/002.eml"] = state["mail/sent/001.eml"].replace(b"The code is", b"Codes: %s," % row["guards"]["forbidden"][0].encode())
    assert checks.score(row, leak).reward == 0.0  # the distractor's code leaked
    damaged = dict(state)
    damaged.pop(sorted(row["files"])[0])
    assert checks.score(row, damaged).reward == 0.0  # a seeded file was deleted


def test_a_sheet_target_may_change_only_the_asked_cell(tmp_path, monkeypatch):
    row = next(r for r in rows(1) if r["template"] == "sheet_lookup")
    state, _ = apply_script(row, tmp_path, monkeypatch)
    path = row["guards"]["targets"][0]
    agent.set_cell.invoke({"path": path, "cell": "A2", "value": "zzz"})
    state[path] = (tmp_path / path).read_bytes()
    score = checks.score(row, state)
    assert score.reward == 0.0 and "A2" in score.guard_failures[0]


def test_a_calendar_target_must_keep_its_events(tmp_path, monkeypatch):
    row = next(r for r in rows(1) if r["template"] == "calendar_same_day")
    state, _ = apply_script(row, tmp_path, monkeypatch)
    path = row["guards"]["targets"][0]
    (tmp_path / path).unlink()
    call = row["script"][2]["tool_calls"][0]["arguments"]
    agent.add_event.invoke(call)  # a calendar holding only the new event
    state[path] = (tmp_path / path).read_bytes()
    score = checks.score(row, state)
    assert all(score.checks.values()) and score.reward == 0.0 and "lost its events" in score.guard_failures[0]


@pytest.mark.parametrize("text, needle, found", [
    ("The code is 4821.", "4821", True), ("code 48210", "4821", False), ("Budget: 12", "12", True),
    ("GOALS and risks", "goals", True), ("", "x", False),
])
def test_numbers_must_stand_alone(text, needle, found):
    assert checks.contains(text, needle) is found


def test_tools_refuse_bad_arguments_with_a_message_for_the_model(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert agent.read.invoke({"path": "../../etc/passwd"}) == "error: '../../etc/passwd' is outside your files"
    assert agent.write.invoke({"path": "/tmp/x.md", "text": "1"}).startswith("error")
    assert agent.read.invoke({"path": "nope.md"}).startswith("error")
    assert agent.add_event.invoke({"path": "c.ics", "title": "x", "date": "May 5", "start": "9", "end": "10"}).startswith("error")
    assert agent.add_event.invoke({"path": "c.ics", "title": "x", "date": "2024-05-05", "start": "10:00",
                                   "end": "09:00"}).startswith("error")
    assert agent.send_email.invoke({"to": "a@x.com, b@x.com", "subject": "s", "body": "b"}).startswith("error")
    assert agent.set_cell.invoke({"path": "data/x.csv", "cell": "E1", "value": "1"}).startswith("error")
    assert agent.write.invoke({"path": "x.csv", "text": "1"}).startswith("error")
    assert not list(tmp_path.iterdir())  # nothing was written by a refused call
