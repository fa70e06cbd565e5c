"""`agentcore-rl sweep`: Hydra multirun, one pytest process per job, a sweep summary."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from toy_project import AGENT

from agentcore_rl_harness.runtimes.ray_loopback import SINGLE_NODE_ENV
from agentcore_rl_harness.sweep import RAY_LAUNCHER, LoopbackRay, render_summary, summarize_sweep

CLI = [sys.executable, "-m", "agentcore_rl_harness.cli", "sweep"]


TASK = '''
import agentcore_rl_harness as arl

@arl.task(dataset="data.jsonl", agent="agent.py", samples=2)
def test_toy(rollout, row):
    rollout.reward = float(len(rollout.result["reply"]) % 2 == 0)
    assert rollout.reward == 1.0
'''


@pytest.fixture
def project(tmp_path):
    rows = [{"id": f"r{i}", "split": "test", "question": f"Say {i}"} for i in range(1)]
    (tmp_path / "data.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    (tmp_path / "agent.py").write_text(AGENT)
    (tmp_path / "test_toy.py").write_text(TASK)
    return tmp_path


def _sweep(cwd, *args, timeout=900):
    return subprocess.run([*CLI, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout)


BASE = ["sweep.mode=eval", "sweep.paths=[test_toy.py]", "model=tiny", "sampling.max_tokens=4",
        "runtime.concurrency=2"]


def _check_2x2(project, sweep_dir, result):
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    summary = json.loads((sweep_dir / "sweep.json").read_text())
    jobs = summary["jobs"]
    assert len(jobs) == 4 and summary["failed"] == []
    assert sorted(tuple(job["overrides"][-2:]) for job in jobs) == sorted(
        (f"seed={seed}", f"sampling.temperature={temperature}")
        for seed in (0, 1) for temperature in (0.5, 1.0))
    assert sum(job["best"] for job in jobs) == (0 if summary["tied"] else 1)  # a tie has no best
    for job in jobs:
        job_dir = sweep_dir / f"job-{job['job']}"
        config = (job_dir / "config.yaml").read_text()
        assert "sweep" not in config and "hydra" not in config  # the job's config only
        assert job["command"][job["command"].index("--agentcore-rl-config") + 1] == str(
            job_dir / "config.yaml")
        assert all(part.startswith("/") for part in job["command"] if part.endswith(".py"))
        report = json.loads((job_dir / "run" / "report.json").read_text())
        assert report["overall"]["rollouts"] == 2  # 1 row x 2 samples
        seed = int(job["overrides"][-2].split("=")[1])
        assert report["run"]["config"]["seed"] == seed
        assert job["metrics"]["n"] == 2
    markdown = (sweep_dir / "sweep.md").read_text()
    assert "4 job(s), 0 failed" in markdown
    assert ("**best**" in markdown) != bool(summary["tied"])


@pytest.mark.slow
def test_2x2_multirun_runs_one_pytest_session_per_job(project, tiny_model_dir):
    sweep_dir = project / "sw"
    result = _sweep(project, "-m", *BASE, "seed=0,1", "sampling.temperature=0.5,1.0",
                    f"hydra.sweep.dir={sweep_dir}")
    _check_2x2(project, sweep_dir, result)


# hydra/launcher=joblib (hydra-joblib-launcher: both jobs at once), submitit_local
# (hydra-submitit-launcher: one local process per job) and ray (hydra-ray-launcher: a local Ray
# cluster started by the sweep, on loopback; its own test below) run the same 2-job sweep as the
# basic launcher: the same jobs, metrics, best job and sweep.md.
LAUNCHERS = {
    "joblib": ("hydra_plugins.hydra_joblib_launcher", "pip install hydra-joblib-launcher",
               ["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"]),
    "submitit_local": ("hydra_plugins.hydra_submitit_launcher", "pip install hydra-submitit-launcher",
                       ["hydra/launcher=submitit_local", "hydra.launcher.timeout_min=15"]),
}


def _two_jobs(root, name, *launcher):
    sweep_dir = root / name
    result = _sweep(root, "-m", *_two_jobs_args(sweep_dir), *launcher)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return sweep_dir


def _two_jobs_args(sweep_dir):
    return [*BASE, "seed=0,1", f"hydra.sweep.dir={sweep_dir}"]


def _summary_content(sweep_dir):
    """sweep.json with this sweep's directory written as <sweep>, and sweep.md."""
    text = (sweep_dir / "sweep.json").read_text().replace(str(sweep_dir), "<sweep>")
    return json.loads(text), (sweep_dir / "sweep.md").read_text()


@pytest.fixture(scope="module")
def basic_two_jobs(tmp_path_factory, tiny_model_dir):
    root = tmp_path_factory.mktemp("launchers")
    (root / "data.jsonl").write_text(json.dumps({"id": "r0", "split": "test", "question": "Say 0"}) + "\n")
    (root / "agent.py").write_text(AGENT)
    (root / "test_toy.py").write_text(TASK)
    return root, _summary_content(_two_jobs(root, "basic"))


@pytest.mark.slow
@pytest.mark.parametrize("launcher", sorted(LAUNCHERS))
def test_cluster_launchers_give_the_basic_launchers_sweep_summary(basic_two_jobs, launcher):
    module, install, overrides = LAUNCHERS[launcher]
    pytest.importorskip(module, reason=install)
    root, basic = basic_two_jobs
    _check_same_summary(_two_jobs(root, launcher, *overrides), basic)


def _check_same_summary(sweep_dir, basic):
    (summary, markdown), (basic_summary, basic_markdown) = _summary_content(sweep_dir), basic
    assert [job["overrides"][-1] for job in summary["jobs"]] == ["seed=0", "seed=1"]
    assert all(job["ok"] and job["metrics"]["n"] == 2 for job in summary["jobs"])
    assert summary == basic_summary and markdown == basic_markdown


# The sweep run in a process that then reads which ports its Ray cluster's processes listen on.
LOOPBACK_SWEEP = """
import dataclasses, json, os, sys
import ray
from agentcore_rl_harness.sweep import main
from listening_sockets import descendants, listeners

code = main(sys.argv[1:])
found = listeners(descendants(os.getpid())) if ray.is_initialized() else []
print(json.dumps({"code": code, "listeners": [
    {**dataclasses.asdict(item), "loopback": item.loopback} for item in found]}))
"""


@pytest.mark.slow
def test_the_ray_launcher_gives_the_basic_summary_from_a_cluster_on_loopback_only(basic_two_jobs):
    """The same 2-job sweep on hydra/launcher=ray; the sweep's process then reads which ports its
    Ray cluster's processes listen on."""
    pytest.importorskip("hydra_plugins.hydra_ray_launcher", reason="pip install hydra-ray-launcher")
    root, basic = basic_two_jobs
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")])}
    env.pop(SINGLE_NODE_ENV, None)
    result = subprocess.run(
        [sys.executable, "-c", LOOPBACK_SWEEP, "-m", *_two_jobs_args(root / "ray"), "hydra/launcher=ray",
         "+hydra.launcher.ray.init.num_cpus=2"],
        cwd=root, capture_output=True, text=True, timeout=900, env=env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    outcome = json.loads(result.stdout.strip().splitlines()[-1])
    assert outcome["code"] == 0
    _check_same_summary(root / "ray", basic)  # the jobs ran (on Ray workers), as the basic ones
    names = {item["name"] for item in outcome["listeners"]}
    assert {"gcs_server", "raylet"} <= names, names
    assert not any(item["port"] == 8265 for item in outcome["listeners"])  # no dashboard
    exposed = [item for item in outcome["listeners"] if not item["loopback"]]
    assert not exposed, f"Ray processes listening beyond loopback: {exposed}"


def test_the_loopback_callback_starts_ray_only_without_an_address(monkeypatch):
    started = []
    monkeypatch.setattr("agentcore_rl_harness.runtimes.ray_loopback.start_local",
                        lambda **init: started.append(init))
    config = OmegaConf.create({"hydra": {"launcher": {
        "_target_": RAY_LAUNCHER, "ray": {"init": {"address": "10.0.0.5:6379"}}}}})
    LoopbackRay().on_multirun_start(config)  # the user's cluster: the launcher joins it
    config.hydra.launcher._target_ = "hydra._internal.core_plugins.basic_launcher.BasicLauncher"
    config.hydra.launcher.ray.init.address = None
    LoopbackRay().on_multirun_start(config)  # not the Ray launcher
    assert started == []
    config.hydra.launcher._target_ = RAY_LAUNCHER
    config.hydra.launcher.ray.init.num_cpus = 2
    LoopbackRay().on_multirun_start(config)
    assert started == [{"address": None, "num_cpus": 2, "object_store_memory": 78_643_200}]


def test_a_failed_job_makes_the_sweep_exit_non_zero(project):
    result = _sweep(project, "sweep.mode=bogus", "model=tiny", f"hydra.run.dir={project / 'one'}",
                    timeout=120)
    assert result.returncode == 1, result.stderr[-2000:]
    summary = json.loads((project / "one" / "sweep.json").read_text())
    assert summary["failed"] == [0] and summary["best"] is None
    assert "sweep.mode='bogus'" in (project / "one" / "sweep.md").read_text()


def test_bad_override_is_reported_by_hydra(project):
    result = _sweep(project, "no_such_group=1", timeout=120)
    assert result.returncode != 0 and "no_such_group" in result.stderr


def _jobs(tmp_path, results):
    for number, (success, returncode) in enumerate(results):
        job_dir = tmp_path / f"job-{number}"
        (job_dir / "run").mkdir(parents=True)
        (job_dir / "job.json").write_text(json.dumps({
            "job": number, "overrides": [f"seed={number}"], "dir": str(job_dir), "mode": "eval",
            "returncode": returncode, "error": None if returncode == 0 else "pytest exited 1",
            "run_dir": str(job_dir / "run"),
        }))
        if success is not None:
            (job_dir / "run" / "report.json").write_text(json.dumps({"overall": {
                "success_rate": {"value": success, "ci_low": 0.0, "ci_high": 1.0, "n": 4},
                "mean_reward": {"value": success}, "failures": {}}}))


def test_summary_marks_the_best_job_and_failures(tmp_path):
    _jobs(tmp_path, [(0.25, 0), (0.75, 0), (None, 1)])
    summary = summarize_sweep(tmp_path)
    assert summary["best"] == 1 and summary["failed"] == [2]
    text = render_summary(summary)
    assert "| 1 **best** | `seed=1` | ok | 75.0%" in text and "FAILED (pytest exited 1)" in text
    assert json.loads((tmp_path / "sweep.json").read_text())["best"] == 1


def test_a_tie_at_the_top_names_no_best_job(tmp_path):
    _jobs(tmp_path, [(0.0, 0), (0.0, 0), (0.0, 0)])
    summary = summarize_sweep(tmp_path)
    assert summary["best"] is None and summary["tied"] == [0, 1, 2]
    text = render_summary(summary)
    assert "**best**" not in text
    assert "Best: none, jobs 0, 1, 2 tie on highest overall success_rate, then mean_reward" in text


def test_a_key_a_project_option_leaves_out_can_be_swept(project):
    """configs/eval/mine.yaml has no `temperature`; Hydra's struct mode alone would refuse it."""
    (project / "configs" / "eval").mkdir(parents=True)
    (project / "configs" / "eval" / "mine.yaml").write_text("split: test\nmax_rows: 1\n")
    (project / "configs" / "config.yaml").write_text("defaults:\n  - agentcore_rl_base\n  - _self_\n")
    shown = _sweep(project, "--cfg", "job", "eval=mine", "eval.temperature=0", timeout=120)
    assert shown.returncode == 0, shown.stderr[-2000:]
    evaluation = OmegaConf.create(shown.stdout)["eval"]
    assert (evaluation.temperature, evaluation.max_rows) == (0, 1)
    # `--cfg` only prints what Hydra composed; the job itself refuses the typo (exit 4, usage error)
    typo = _sweep(project, "eval=mine", "eval.temprature=0", timeout=120)
    assert typo.returncode != 0 and "temprature" in typo.stdout + typo.stderr
