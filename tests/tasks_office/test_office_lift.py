"""Level 1m, the office pack's RL-lift level: level 1's mail forwarding with only its three tools
offered. Its data and reward in-process, then the real agent through pytest with `model=tiny`:
the teacher-forced oracle succeeds on every row it plays, the null and spam agents score 0."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from office_pack import PACK, load, rows

from agentcore_rl_harness.config import compose_config

agent = load("agent")
checks = load("office_checks")
make = load("make_office")
LIFT = rows("1m")
CONFIG = PACK / "configs" / "lift.yaml"


def files_of(workdir):
    return {str(p.relative_to(workdir)): p.read_bytes() for p in workdir.rglob("*") if p.is_file()}


def play(row, calls, workdir, monkeypatch):
    """Seed the row's files as the agent does, run (name, arguments) calls with the real tools,
    and score the end state."""
    monkeypatch.chdir(workdir)
    agent.seed(row["files"], row["tables"])
    tools = {tool.name: tool for tool in agent.offered_tools(row["tools"])}
    for name, arguments in calls:
        tools[name].invoke(arguments)
    return checks.score(row, files_of(workdir))


def script_calls(row):
    return [(call["name"], call["arguments"]) for turn in row["script"] for call in turn.get("tool_calls", [])]


def test_the_committed_data_is_what_the_seeded_generator_makes():
    expected = "".join(json.dumps(r) + "\n" for r in make.make_forward_rows())
    assert (PACK / "data" / "office-l1m.jsonl").read_text() == expected, "run python tasks/office/make_office.py"


def test_rows_are_distinct_with_disjoint_train_and_test_splits():
    assert Counter(row["split"] for row in LIFT) == {"train": 60, "test": 40}
    assert len({row["id"] for row in LIFT}) == len(LIFT)
    assert len({(row["task"], json.dumps(row["files"], sort_keys=True)) for row in LIFT}) == len(LIFT)
    level1 = {(row["task"], json.dumps(row["files"], sort_keys=True)) for row in rows(1)}
    assert not level1 & {(row["task"], json.dumps(row["files"], sort_keys=True)) for row in LIFT}


def test_success_needs_three_calls_over_three_tools_and_nothing_can_be_guessed():
    for row in LIFT:
        calls = script_calls(row)
        assert [name for name, _ in calls] == ["ls", "read", "send_email"] == row["tools"], row["id"]
        code = row["evaluation"][1]["args"]["text"]
        mail = calls[1][1]["path"]
        assert mail not in row["task"] and code not in row["task"], "the file and the code must be found"
        assert code in row["files"][mail] and mail.startswith("mail/inbox/")
        assert len(row["files"]) >= 3, "the right mail is one of several"


@pytest.mark.parametrize("row", LIFT, ids=lambda row: row["id"])
def test_every_rows_script_reaches_every_check_with_the_real_tools(row, tmp_path, monkeypatch):
    score = play(row, script_calls(row), tmp_path, monkeypatch)
    assert score.reward == 1.0 and score.success and score.guard_failures == []


def test_doing_nothing_or_half_the_work_is_not_success(tmp_path, monkeypatch):
    row = LIFT[0]
    target = row["guards"]["recipients"][0]
    for name in ("none", "half"):
        (tmp_path / name).mkdir()
    assert play(row, [], tmp_path / "none", monkeypatch).reward == 0.0
    half = play(row, [("send_email", {"to": target, "subject": "Code", "body": "The code is 1234."})],
                tmp_path / "half", monkeypatch)
    assert half.reward == 0.5 and not half.success  # the right person, no code


def test_spamming_mail_or_codes_scores_zero(tmp_path, monkeypatch):
    for row in [r for r in LIFT if r["guards"]["forbidden"]][:5]:
        code, target = row["evaluation"][1]["args"]["text"], row["guards"]["recipients"][0]
        every_code = " ".join(sorted({code, *row["guards"]["forbidden"]}))
        workdir = tmp_path / row["id"]
        workdir.mkdir()
        (workdir / "a").mkdir()
        assert play(row, [("send_email", {"to": target, "subject": "Codes", "body": every_code})],
                    workdir / "a", monkeypatch).reward == 0.0  # every code in the inbox: a leak
        (workdir / "b").mkdir()
        everyone = [("send_email", {"to": f"{name.lower()}@example.com", "subject": "Code",
                                    "body": f"The code is {code}."}) for name in make.PEOPLE]
        assert play(row, everyone, workdir / "b", monkeypatch).reward == 0.0  # mail to others


def test_the_mail_listing_puts_each_sender_right_before_its_file(tmp_path, monkeypatch):
    row = LIFT[0]
    monkeypatch.chdir(tmp_path)
    agent.seed(row["files"], row["tables"])
    lines = agent.ls.invoke({"path": "mail/inbox"}).splitlines()
    assert len(lines) == len(row["files"])
    for line, name in zip(lines, sorted(row["files"])):
        sender = row["files"][name].splitlines()[0].removeprefix("From: ")
        assert line.startswith(f"from: {sender} | {name.rsplit('/', 1)[1]} | subject: "), line


def test_the_agent_offers_only_the_tools_a_row_names():
    assert [tool.name for tool in agent.offered_tools(["send_email", "ls", "read"])] == ["ls", "read", "send_email"]
    assert agent.offered_tools(None) == agent.TOOLS
    for bad in (["ls", "rm"], []):
        with pytest.raises(ValueError, match="subset"):
            agent.offered_tools(bad)


def test_a_rows_budget_of_model_calls_sets_the_agents_recursion_limit():
    assert {row["max_model_calls"] for row in LIFT} == {5}  # success takes 4: three tools, the reply
    assert agent.recursion_limit(5) == 10 and agent.recursion_limit(None) == 2 * agent.MAX_MODEL_CALLS
    for bad in (0, 33, "5", 2.0, True):
        with pytest.raises(ValueError, match="max_model_calls must be an integer from 1 to 32"):
            agent.recursion_limit(bad)


def test_the_lift_config_composes_to_the_measured_recipe():
    typed = compose_config([], source=CONFIG).typed
    assert typed.model.name == "smollm2-135m-instruct" and typed.trainer.trainer.kind == "local"
    assert typed.sampling.max_tokens >= 55  # the longest right turn
    loop = typed.trainer.loop
    assert loop.steps * loop.batch_rows <= 60, "RL draws each train row at most once"
    # run X's recipe (tasks/office/README.md): greedy evaluations, an 8-step warm-up on 24 demonstrations, then 9
    # GRPO steps on rollouts at T = 1.0, each step's running during the previous update, with the
    # sampler decoding a bf16 merged copy
    assert typed.eval_sampling().temperature == 0 and typed.sampling.temperature == 1.0
    assert typed.warmup.enabled and (typed.warmup.steps, typed.warmup.max_demonstrations) == (8, 24)
    assert (loop.steps, loop.batch_rows, loop.group_size, loop.overlap_rollouts) == (9, 2, 8, True)
    assert typed.trainer.trainer.serve_dtype == "bfloat16" and typed.trainer.trainer.lr == 3e-4


def run_pack(pytester, agent_name, *sets):
    out = pytester.path / agent_name
    args = [str(PACK), "-k", "level1m", "-p", "no:cacheprovider", "--agentcore-rl", "eval",
            "--agentcore-rl-config", str(CONFIG), "--agentcore-rl-out", str(out)]
    for setting in ("model=tiny", f"agent={agent_name}", "eval.samples=1", "runtime.concurrency=4", *sets):
        args += ["--agentcore-rl-set", setting]
    result = pytester.runpytest_subprocess(*args, timeout=900)
    assert result.ret == 0, result.stdout.str()[-3000:]
    return result, [json.loads(line) for line in (out / "rollouts.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_the_oracle_plays_its_script_through_the_real_agent_and_succeeds(pytester, tiny_model_dir):
    # 3 rows through the real agent; every row's script is played with the real tools above
    result, records = run_pack(pytester, "oracle", "eval.max_rows=3")
    result.assert_outcomes(passed=3)
    for record in records:
        assert record["task"] == "test_office_level1m" and record["status"] == "completed"
        assert record["reward"] == 1.0 and record["success"] is True
        assert record["result"]["tool_calls"] == ["ls", "read", "send_email"] and record["turns"] == 4
        (trace,) = record["traces"]
        assert trace["metadata"]["teacher_forced"] is True


@pytest.mark.slow
@pytest.mark.parametrize("agent_name", ["null", "spam"])
def test_the_null_and_spam_agents_score_zero(pytester, tiny_model_dir, agent_name):
    result, records = run_pack(pytester, agent_name, "eval.max_rows=3")
    result.assert_outcomes(failed=3)
    for record in records:
        assert record["status"] == "task_failed" and record["reward"] == 0.0 and record["success"] is False
        assert record["rewards"]["checks"] == 0.0
