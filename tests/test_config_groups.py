"""The `eval`, `gates` and `report` config groups: packaged options, validation, extension."""

import json
from pathlib import Path

import pytest

from agentcore_rl_harness.config import compose_config
from agentcore_rl_harness.errors import ConfigError

BUNDLED_CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def test_defaults_select_default_none_default():
    typed = compose_config().typed
    assert (typed.eval.samples, typed.eval.max_rows, typed.eval.timeout_s) == (None, None, 300.0)
    assert (typed.gates.min_success_rate, typed.gates.max_regression) == (None, None)
    assert typed.report.formats == ("json", "md", "html", "junit")
    assert typed.report.step_summary and typed.report.progress == "auto"


@pytest.mark.parametrize(
    "overrides, check",
    [
        (["eval=quick"], lambda t: (t.eval.samples, t.eval.max_rows) == (1, 10)),
        (["eval=full"], lambda t: (t.eval.samples, t.eval.max_rows) == (8, None)),
        (["eval=quick", "eval.samples=4"], lambda t: (t.eval.samples, t.eval.max_rows) == (4, 10)),
        (["eval.samples=4"], lambda t: t.eval.samples == 4 and t.eval.timeout_s == 300),
        ([], lambda t: t.eval.temperature is None and t.eval_sampling() is None),
        (["sampling.temperature=0.7", "eval.temperature=0"],
         lambda t: (t.sampling.temperature, t.eval_sampling().temperature, t.eval_sampling().max_tokens)
         == (0.7, 0.0, t.sampling.max_tokens)),
        (["eval=quick", "eval.temperature=0.2"], lambda t: t.eval.temperature == 0.2),
        (["gates=ci"], lambda t: t.gates.min_success_rate == 0.5
         and t.gates.max_regression == {"success_rate": "-2pp"}),
        (["gates=ci", "gates.min_success_rate=0.9"], lambda t: t.gates.min_success_rate == 0.9),
        (["gates.min_success_rate={overall: 0.5, test_x: 1}"],
         lambda t: t.gates.min_success_rate == {"overall": 0.5, "test_x": 1.0}),
        (["gates.max_regression={mean_reward: -0.05}"],
         lambda t: t.gates.max_regression == {"mean_reward": -0.05}),
        (["report=minimal"], lambda t: t.report.formats == ("json", "junit")
         and not t.report.step_summary and t.report.progress == "lines"),
        (["report.formats=[json,md]", "report.progress=off"],
         lambda t: t.report.formats == ("json", "md") and t.report.progress == "off"),
    ],
)
def test_group_options_and_key_overrides_compose(overrides, check):
    assert check(compose_config(overrides).typed)


@pytest.mark.parametrize(
    "override, message",
    [
        ("eval=nope", "eval: default, full, quick; gates: ci, none;"),
        ("report=nope", "report: default, minimal"),
        ("eval.samples=0", "eval.samples=0 must be >= 1"),
        ("eval.temperature=-0.5", "eval.temperature=-0.5 must be >= 0"),
        ("eval.timeout_s=-1", "eval.timeout_s=-1.0 must be > 0"),
        ("gates.min_success_rate=80", "gates.min_success_rate=80.0 must be a rate between 0 and 1"),
        ("gates.min_success_rate={test_x: 1.5}", "gates.min_success_rate.test_x=1.5"),
        ("gates.max_regression={speed: -2pp}",
         "unknown metric(s) ['speed']; valid choices: ['success_rate', 'mean_reward']"),
        ("gates.max_regression={success_rate: lots}", "expected an amount like '-2pp'"),
        ("report.formats=[json,pdf]",
         "unknown format(s) ['pdf']; valid choices: ['json', 'md', 'html', 'junit']"),
        ("report.formats=[md]", "must include json"),
        ("report.progress=fancy", "report.progress='fancy' is not supported; valid choices: "
                                  "['auto', 'lines', 'off']"),
        ("report.step_summary=maybe", "report.step_summary must be bool"),
        ("+report.pdf=1", "unknown config key(s) `pdf` under report"),
    ],
)
def test_bad_values_name_the_choices(override, message):
    with pytest.raises(ConfigError) as info:
        compose_config([override])
    assert message in str(info.value)


def _project_configs(root: Path) -> Path:
    configs = root / "configs"
    (configs / "eval").mkdir(parents=True)
    (configs / "eval" / "mine.yaml").write_text(
        "split: test\nsamples: 3\nmax_rows: 1\ntimeout_s: 60\n")
    (configs / "config.yaml").write_text("defaults:\n  - agentcore_rl_base\n  - _self_\n")
    return configs


def test_a_project_adds_its_own_option_to_a_packaged_group(tmp_path):
    configs = _project_configs(tmp_path)
    typed = compose_config(["eval=mine"], source=configs).typed
    assert (typed.eval.samples, typed.eval.max_rows, typed.eval.timeout_s) == (3, 1, 60.0)
    assert compose_config(["eval=quick"], source=configs).typed.eval.samples == 1  # still there
    with pytest.raises(ConfigError, match="eval: default, full, mine, quick"):
        compose_config(["eval=nope"], source=configs)



def test_a_key_the_project_option_leaves_out_can_still_be_set(tmp_path):
    """mine.yaml has no `temperature` (nor nested keys): Hydra's struct mode alone would refuse
    `eval.temperature=0` while it is selected; every schema key has a default, so it is added."""
    configs = _project_configs(tmp_path)
    typed = compose_config(["eval=mine", "eval.temperature=0"], source=configs).typed
    assert (typed.eval.temperature, typed.eval.samples) == (0.0, 3)
    assert compose_config(["eval=mine"], source=configs).typed.eval.temperature is None  # the default
    # a key the schema does not know is still refused, naming it
    with pytest.raises(ConfigError, match="temprature"):
        compose_config(["eval=mine", "eval.temprature=0"], source=configs)
    with pytest.raises(ConfigError, match=r"eval.temperature=-1.0 must be >= 0"):
        compose_config(["eval=mine", "eval.temperature=-1"], source=configs)

def test_project_option_selected_from_the_command_line(pytester):
    _project_configs(pytester.path)
    rows = [{"id": f"r{i}", "split": "test"} for i in range(4)]
    pytester.path.joinpath("data.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    pytester.makepyfile(test_task="""
import agentcore_rl_harness as arl

@arl.task(dataset="data.jsonl", agent="agent.py", samples=2)
def test_echo(rollout, row):
    pass
""")
    result = pytester.runpytest("--agentcore-rl", "eval", "--collect-only", "-q",
                                "--agentcore-rl-out", "out", "--agentcore-rl-set", "eval=mine")
    result.stdout.fnmatch_lines(["test_task.py::test_echo[r0-s2]", "*3 tests collected*"])
    bad = pytester.runpytest("--agentcore-rl", "eval", "--agentcore-rl-set", "report=nope")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    bad.stderr.fnmatch_lines(["*report: default, minimal*"])
    # a regression gate without a baseline is caught before anything runs
    no_baseline = pytester.runpytest("--agentcore-rl", "eval", "--agentcore-rl-set", "gates=ci",
                                     "--agentcore-rl-out", "out2")
    assert no_baseline.ret == pytest.ExitCode.USAGE_ERROR
    no_baseline.stderr.fnmatch_lines(["*gates.max_regression*--agentcore-rl-compare*"])


def test_the_bundled_project_configs_compose():
    bundled = compose_config(source=BUNDLED_CONFIGS).typed
    assert (bundled.eval.samples, bundled.eval.max_rows) == (2, None)  # its own eval option, `bundled`
    assert bundled.report.formats[0] == "json"
    typed = compose_config(["eval=quick", "gates=ci", "report=minimal"], source=BUNDLED_CONFIGS).typed
    # a group option replaces the project's option whole: quick means 10 rows x 1 sample there too
    assert (typed.eval.samples, typed.eval.max_rows, typed.eval.timeout_s) == (1, 10, 120.0)
    assert typed.gates.min_success_rate == 0.5


def _report_and_rollouts():
    from agentcore_rl_harness.records import Rollout, Status, Trace, Usage
    from agentcore_rl_harness.reports.build import build_report

    rollout = Rollout(
        run_id="run", task="t", row_id="r1", sample_index=0, group_id="t/r1/eval", phase="eval",
        step=None, session_id="arl-x", status=Status.COMPLETED, error=None, reward=1.0,
        rewards={}, success=True, result={}, turns=1, usage=Usage(5, 2), elapsed_s=0.5,
        traces=(Trace(token_ids=(1, 2, 3), prompt_length=2, loss_mask=(1,), logprobs=(-0.1,),
                      finish_reason="stop"),),
    )
    report = build_report(
        run_id="run", mode="eval", config={"seed": 0}, overrides=[], versions={}, git_sha=None,
        started_at="", wall_time_s=1.0, rollouts=[rollout], item_phase="eval",
    )
    return report, [rollout]


@pytest.mark.parametrize(
    "overrides, files, summary",
    [
        ([], {"report.json", "report.md", "report.html", "junit.xml"}, True),
        (["report=minimal"], {"report.json", "junit.xml"}, False),
        (["report.formats=[json,md]", "report.step_summary=false"], {"report.json", "report.md"}, False),
    ],
)
def test_report_files_follow_the_report_group(tmp_path, monkeypatch, overrides, files, summary):
    from agentcore_rl_harness.run.finish import write_report_files

    step_summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step_summary))
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    report, rollouts = _report_and_rollouts()
    write_report_files(run_dir, report, rollouts, compose_config(overrides).typed.report)
    assert {p.name for p in run_dir.iterdir()} == files
    assert step_summary.exists() is summary
