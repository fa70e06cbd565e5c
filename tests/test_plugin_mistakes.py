"""A new user's mistakes with task files, datasets and models: each ends with a message that
says what is wrong and how to fix it, and with the exit status pytest gives a usage error (4) or
an empty collection (5). Black box, through pytester; no rollout runs."""

import json

import pytest

TASK = '''
import agentcore_rl_harness as arl

@arl.task(dataset="data.jsonl", agent="agent.py", samples=1)
def {name}(rollout, row):
    assert True
'''
AGENT = "def invoke(payload):\n    return {}\n"


def _project(pytester, *, task_file="test_shop.py", name="test_shop", rows=({"id": "a", "split": "test"},)):
    pytester.path.joinpath("agent.py").write_text(AGENT)
    pytester.path.joinpath(task_file).write_text(TASK.format(name=name))
    if rows is not None:
        pytester.path.joinpath("data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def _run(pytester, *extra):
    return pytester.runpytest_subprocess("--agentcore-rl", "eval", "--agentcore-rl-set", "model=tiny",
                                         *extra, timeout=300)


@pytest.mark.parametrize("rows, said", [
    (None, "dataset file {path} does not exist"),
    ((), "dataset file {path} has no rows"),
])
def test_a_missing_or_empty_dataset_is_a_usage_error(pytester, rows, said):
    _project(pytester, rows=rows)
    if rows is not None:
        pytester.path.joinpath("data.jsonl").write_text("")
    result = _run(pytester)
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()
    result.stderr.fnmatch_lines(["ERROR: task test_shop: " + said.format(path=pytester.path / "data.jsonl") + "*"])
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()


def test_a_model_name_that_does_not_resolve_is_a_usage_error_with_the_message_alone(pytester):
    _project(pytester)
    result = _run(pytester, "--agentcore-rl-set", "model.name=/nope")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: agentcore-rl eval: model '/nope' is neither a known name (tiny, "
                                 "smollm2-135m-instruct) nor a local Hugging Face model folder*"])
    output = result.stdout.str() + result.stderr.str()
    assert "INTERNALERROR" not in output and "Traceback" not in output


def test_a_task_function_pytest_does_not_collect_is_a_collection_error_naming_the_rename(pytester):
    _project(pytester, name="shop")
    result = _run(pytester)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["shop in test_shop.py is an @arl.task, but pytest collects only functions "
                                 "named test* (ini python_functions): rename it to test_shop"])


def test_collecting_no_task_says_where_it_looked_and_which_file_to_rename(pytester):
    _project(pytester, task_file="shop_task.py")
    result = _run(pytester)
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED
    result.stdout.fnmatch_lines([
        f"agentcore-rl eval: collected 0 tasks (looked in {pytester.path}).",
        "*pytest collects task files named test_*.py or *_test.py (ini python_files)*functions named test**",
        f"*{pytester.path / 'shop_task.py'} declares an @arl.task but its name does not match: rename it "
        "to test_shop_task.py",
    ])


@pytest.mark.slow
def test_an_agent_that_fails_to_import_fails_once_and_the_other_sessions_end_at_once(pytester, tiny_model_dir):
    _project(pytester, rows=[{"id": f"q{n}", "split": "test"} for n in range(3)])
    pytester.path.joinpath("test_shop.py").write_text(TASK.format(name="test_shop").replace("samples=1", "samples=2"))
    pytester.path.joinpath("agent.py").write_text("import no_such_module_for_arl_tests\n")
    result = _run(pytester, "--agentcore-rl-out", "run")
    assert result.ret == 0, result.stdout.str()[-3000:]  # the agent's failure is data
    result.assert_outcomes(failed=6)
    records = [json.loads(line) for line in (pytester.path / "run" / "rollouts.jsonl").read_text().splitlines()]
    assert {r["status"] for r in records} == {"agent_error"}
    loaded = [r for r in records if r["error"].startswith("cannot load the agent")]
    assert len(loaded) == 1 and "No module named 'no_such_module_for_arl_tests'" in loaded[0]["error"]
    for record in records:
        if record is not loaded[0]:
            assert record["error"].startswith("agent ") and "failed to load in an earlier session of this run, " \
                "so it is not started again; fix it and rerun: cannot load the agent" in record["error"]
            # waited for the first session's import, then ended with it: not imported again
            assert record["elapsed_s"] < loaded[0]["elapsed_s"] + 0.5
