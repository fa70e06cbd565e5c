"""The plugin as a black box through pytester (no model is started by these tests)."""

import json

import pytest

TASK_FILE = """
import agentcore_rl_harness as arl

@arl.task(dataset="data.jsonl", agent="agent.py", samples=2)
def test_echo(rollout, row):
    assert rollout.result.get("answer") == row["answer"]

def test_ordinary():
    assert 1 + 1 == 2
"""


@pytest.fixture
def project(pytester):
    rows = [{"id": f"r{i}", "split": "test" if i < 3 else "train", "answer": i} for i in range(5)]
    pytester.path.joinpath("data.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    pytester.makepyfile(test_task=TASK_FILE)
    return pytester


REGISTERED_FILE = """
def test_registered(request):
    names = {name for name, _ in request.config.pluginmanager.list_name_plugin()}
    with_run = request.config.getoption("agentcore_rl") is not None
    assert ("agentcore-rl-run" in names, "agentcore-rl-tasks-skipped" in names) == (with_run, not with_run)
"""


def test_without_flag_tasks_skip_with_reason_and_ordinary_tests_run(project):
    project.makepyfile(test_registered=REGISTERED_FILE)  # and the run's hooks are not registered
    result = project.runpytest("-rs")
    result.assert_outcomes(passed=2, skipped=1)
    result.stdout.fnmatch_lines(["*run it with `pytest --agentcore-rl eval`*"])


def test_the_run_hooks_are_registered_only_for_a_run(project):
    """pytest's junitxml pattern: the per-run plugin object exists only with --agentcore-rl."""
    project.makepyfile(test_registered=REGISTERED_FILE)
    project.runpytest("--agentcore-rl", "eval", "-k", "registered").assert_outcomes(passed=1, deselected=7)


def test_collect_only_expands_rows_times_samples(project):
    result = project.runpytest("--agentcore-rl", "eval", "--collect-only", "-q",
                               "--agentcore-rl-out", "out")
    lines = result.stdout.str().splitlines()
    for nodeid in ("test_echo[r0-s0]", "test_echo[r0-s1]", "test_echo[r2-s1]", "test_ordinary"):
        assert f"test_task.py::{nodeid}" in lines
    assert "r3" not in result.stdout.str()  # train rows are not evaluated
    assert not (project.path / "out").exists()  # no rollout ran: nothing is written


def test_sessions_without_rollouts_create_no_run_directory(project):
    result = project.runpytest("--agentcore-rl", "eval", "--collect-only", "-q")
    assert result.ret == pytest.ExitCode.OK
    result = project.runpytest("--agentcore-rl", "eval", "-k", "ordinary")
    result.assert_outcomes(passed=1, deselected=6)
    result.stdout.fnmatch_lines(["*no rollout ran, so no run directory was written*"])
    assert not (project.path / "outputs").exists()


def test_max_rows_and_samples_overrides(project):
    result = project.runpytest(
        "--agentcore-rl", "eval", "--collect-only", "-q", "--agentcore-rl-out", "out",
        "--agentcore-rl-set", "eval.max_rows=1", "--agentcore-rl-set", "eval.samples=3",
    )
    assert "test_task.py::test_echo[r0-s2]" in result.stdout.str()
    result.stdout.fnmatch_lines(["*4 tests collected*"])


def test_collect_mode_uses_train_split(project):
    result = project.runpytest("--agentcore-rl", "collect", "--collect-only", "-q",
                               "--agentcore-rl-out", "out", "-k", "echo")
    out = result.stdout.str()
    assert "test_task.py::test_echo[r3-s0]" in out and "test_task.py::test_echo[r4-s1]" in out


def test_unknown_mode_is_a_usage_error_naming_choices(project):
    result = project.runpytest("--agentcore-rl", "bogus")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--agentcore-rl 'bogus': unknown mode; valid choices: eval, collect, train, run*"])


def test_bad_override_is_a_usage_error_listing_options(project):
    result = project.runpytest("--agentcore-rl", "eval", "--agentcore-rl-set", "model=nope",
                               "--agentcore-rl-out", "out")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*Could not find 'model/nope'*"])
    assert "tiny" in result.stderr.str()


def test_override_without_equals_and_flags_without_mode(project):
    result = project.runpytest("--agentcore-rl", "eval", "--agentcore-rl-set", "model")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*expected KEY=VALUE*"])
    result = project.runpytest("--agentcore-rl-set", "model=tiny")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--agentcore-rl-set needs --agentcore-rl MODE*"])


def test_unknown_config_key_and_bad_type(project):
    result = project.runpytest("--agentcore-rl", "eval", "--agentcore-rl-set", "+eval.foo=1")
    assert "unknown config key(s) `foo` under eval; valid keys of eval: " in result.stderr.str()
    result = project.runpytest("--agentcore-rl", "eval", "--agentcore-rl-set", "eval.timeout_s=soon")
    result.stderr.fnmatch_lines(["*eval.timeout_s must be float*"])


def test_project_config_dir_and_ini_overrides(project):
    configs = project.path / "configs"
    configs.mkdir()
    (configs / "config.yaml").write_text(
        "defaults:\n  - agentcore_rl_base\n  - override model: tiny\n  - _self_\neval:\n  max_rows: 2\n"
    )
    project.makeini("[pytest]\nagentcore_rl_set =\n    eval.samples=1\n")
    project.makepyfile(test_config="""
def test_composed(agentcore_rl_config):
    assert agentcore_rl_config.model.name == "tiny" and agentcore_rl_config.eval.max_rows == 2
""")
    result = project.runpytest("--agentcore-rl", "eval", "--collect-only", "-q",
                               "--agentcore-rl-out", "out")
    result.stdout.fnmatch_lines(["*4 tests collected*"])
    result = project.runpytest("--agentcore-rl", "eval", "-k", "composed", "--agentcore-rl-out", "out")
    result.assert_outcomes(passed=1, deselected=3)


def test_run_mode_items_are_the_post_eval_and_train_mode_has_one_item_per_task(project):
    result = project.runpytest("--agentcore-rl", "run", "--collect-only", "-q",
                               "--agentcore-rl-out", "out", "-k", "echo")
    assert "test_task.py::test_echo[r0-s0]" in result.stdout.str()
    result.stdout.fnmatch_lines(["*6/7 tests collected*"])
    result = project.runpytest("--agentcore-rl", "train", "--collect-only", "-q",
                               "--agentcore-rl-out", "out2", "-k", "echo")
    assert "test_task.py::test_echo[train]" in result.stdout.str()
    result.stdout.fnmatch_lines(["*1/2 tests collected*"])


def test_missing_dataset_is_a_usage_error_with_the_path(pytester):
    pytester.makepyfile(test_t="""
import agentcore_rl_harness as arl

@arl.task(dataset="missing.jsonl", agent="agent.py")
def test_x(rollout, row):
    pass
""")
    result = pytester.runpytest("--agentcore-rl", "eval", "--agentcore-rl-out", "out")
    assert result.ret == pytest.ExitCode.USAGE_ERROR  # like an empty dataset (issue 32)
    assert any("dataset file" in line and "missing.jsonl does not exist" in line
               for line in result.outlines + result.errlines)


def test_xdist_training_is_refused_and_plain_xdist_is_left_alone(project):
    pytest.importorskip("xdist", reason="pip install pytest-xdist")
    result = project.runpytest("-n", "2", "--agentcore-rl", "train", "--agentcore-rl-out", "out")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--agentcore-rl train does not run under pytest-xdist (-n*"
                                 "Use -n with eval or collect; train without -n*"])
    assert not (project.path / "out").exists()
    plain = project.runpytest("-n", "2")
    plain.assert_outcomes(passed=1, skipped=1)
    no_workers = project.runpytest("-n", "0", "--agentcore-rl", "eval", "--collect-only", "-q")
    assert no_workers.ret == pytest.ExitCode.OK


def test_missing_torch_is_a_usage_error_with_the_install_hint(project):
    # first on sys.path (the rootdir): `import torch` fails as it does where torch is not installed
    project.makepyfile(torch="raise ModuleNotFoundError(\"No module named 'torch'\")\n")
    result = project.runpytest("--agentcore-rl", "eval", "--agentcore-rl-set", "model=tiny",
                               "--agentcore-rl-out", "out")
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()[-3000:]
    result.stderr.fnmatch_lines(["ERROR: agentcore-rl eval: *No module named 'torch'*"])
    assert "pip install 'agentcore-rl-harness[local]'" in result.stderr.str()
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
    assert not (project.path / "out").exists()
