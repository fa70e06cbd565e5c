"""`trainer=tinker` under `trainer.mode=async`: `pytest --agentcore-rl train` in a subprocess against
a real `agentcore-rl tinker-server` (tiny model) through the real `tinker` SDK, plugin, gateway and
local runtime. Steps train while rollouts go on, a live session's later turn is sampled by the
sampling client a step handed over (its turns record two policy versions), every trained sample
is within `algo.max_staleness`, and no rollout is trained twice."""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import sys
import time

import pytest
from toy_project import kill_group, write_project

pytest.importorskip("tinker")

pytestmark = pytest.mark.slow

KEY = "tml-agentcore-rl-async-test"
SAMPLES = 2

# Two turns. Row r0's sessions leave a marker after their first turn and wait for the first step
# line before their second; every other row waits for both r0 markers before its second turn. So
# step 1 (which never waits for r0: its lag stays within K=1) trains only after r0's first turns
# were sampled under version 0, and r0's second turns come after step 1 published version 1.
AGENT = '''
import glob, os, time
from bedrock_agentcore import BedrockAgentCoreApp
from openai import OpenAI

app = BedrockAgentCoreApp()

def wait_until(found):
    deadline = time.monotonic() + 120  # past it the turn goes on, and the test's asserts fail
    while not found() and time.monotonic() < deadline:
        time.sleep(0.05)

@app.entrypoint
def invoke(payload):
    rollout = payload["_rollout"]
    client = OpenAI(base_url=rollout["base_url"], api_key=rollout["api_key"])
    messages = [{"role": "user", "content": payload["question"]}]
    first = client.chat.completions.create(model=rollout["model_id"], messages=messages)
    messages += [{"role": "assistant", "content": first.choices[0].message.content or ""},
                 {"role": "user", "content": "And again?"}]
    signals = payload["signals"]
    if payload["id"] == "r0":
        open(os.path.join(signals, "r0-" + rollout["api_key"]), "w").close()
        wait_until(lambda: os.path.exists(payload["first_step"]))
    else:
        wait_until(lambda: len(glob.glob(os.path.join(signals, "r0-*"))) >= payload["r0_samples"])
    second = client.chat.completions.create(model=rollout["model_id"], messages=messages)
    return {"reply": second.choices[0].message.content or ""}
'''

# Sample 0 of every group is rewarded: no group is constant, so every step trains.
TASK = f'''
import agentcore_rl_harness as arl

@arl.reward
def first_sample(rollout, row):
    return float(rollout.sample_index == 0)

@arl.task(dataset="data.jsonl", agent="agent.py", samples={SAMPLES}, rewards=[first_sample])
def test_toy(rollout, row):
    assert rollout.reward == 1.0
'''


def _server_url(process, timeout_s=180):
    selector = selectors.DefaultSelector()
    selector.register(process.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and process.poll() is None:
        if selector.select(timeout=0.2):
            return process.stdout.readline().strip()
    raise AssertionError(f"tinker-server printed no URL within {timeout_s} s (exit code {process.poll()})")


@pytest.fixture
def tinker_server_url(tmp_path, tiny_model_dir):
    """The real `agentcore-rl tinker-server` command, serving the tiny model."""
    process = subprocess.Popen(
        [sys.executable, "-m", "agentcore_rl_harness.cli", "tinker-server", "--model", "tiny", "--port", "0",
         "--api-key", KEY, "--checkpoint-dir", str(tmp_path / "tinker-checkpoints")],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "TINKER_TELEMETRY": "0"})
    try:
        yield _server_url(process)
    finally:
        process.terminate()
        process.wait(timeout=30)


def _lines(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_async_training_on_the_tinker_service(tmp_path, tinker_server_url):
    run, signals = tmp_path / "run", tmp_path / "signals"
    signals.mkdir()
    dataset = [{"id": f"r{i}", "split": "train" if i < 4 else "test", "question": f"Say {i}",
                "signals": str(signals), "first_step": str(run / "train" / "steps.jsonl"), "r0_samples": SAMPLES}
               for i in range(5)]
    write_project(tmp_path, task=TASK, dataset=dataset, agent=AGENT)
    settings = ["model=tiny", "sampling.max_tokens=6", "trainer=tinker", f"trainer.base_url={tinker_server_url}",
                "trainer.lora_rank=8", "trainer.lr=1e-2", "trainer.mode=async", "algo.max_staleness=1",
                "trainer.steps=3", "trainer.batch_rows=2", "runtime.concurrency=8",
                "runtime.isolation=none",  # the agents read and write the signal files beside the run
                "report.progress=lines"]
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--agentcore-rl", "train",
               *[arg for setting in settings for arg in ("--agentcore-rl-set", setting)], "--agentcore-rl-out", "run"]
    process = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True,
                               env={**os.environ, "TINKER_API_KEY": KEY, "TINKER_TELEMETRY": "0", "HF_HUB_OFFLINE": "1"})
    try:
        stdout, stderr = process.communicate(timeout=900)
    finally:
        kill_group(process)
    assert process.returncode == 0, stdout[-4000:] + stderr[-2000:]
    assert "done (async" in stdout

    steps = _lines(run / "train" / "steps.jsonl")
    assert [s["step"] for s in steps] == [1, 2, 3]
    # every step trained on the service and moved the policy on by one version
    assert [s["policy_version"] for s in steps] == [1, 2, 3]
    assert all(s["loss"] is not None and s["trained_tokens"] > 0 for s in steps)
    assert [s["async"]["version_trained"] for s in steps] == [0, 1, 2]

    records = [r for r in _lines(run / "rollouts.jsonl") if r["phase"] == "train"]
    keys = [(r["group_id"], r["sample_index"]) for r in records]
    assert len(keys) == len(set(keys))  # each rollout recorded once
    trained = [group for s in steps for group in s["groups_trained"]]
    assert len(trained) == len(set(trained)) == 3 * 2  # no group trained twice
    for group in trained:  # a trained group was whole
        assert sorted(i for g, i in keys if g == group) == list(range(SAMPLES))

    versions = {(r["group_id"], r["sample_index"]): r["traces"][0]["metadata"]["policy_versions"] for r in records}
    assert all(len(r["traces"]) == 1 for r in records)  # two turns, one exact token sequence
    # r0's live sessions moved to the new sampling client between their turns
    first_r0 = min(r["group_id"] for r in records if r["row_id"] == "r0")
    assert [versions[(first_r0, i)] for i in range(SAMPLES)] == [[0, 1]] * SAMPLES
    assert len({v for vs in versions.values() for v in vs}) > 1
    for s in steps:  # the staleness bound: no trained sample more than K=1 behind the trainer
        assert all(int(lag) <= 1 for lag in s["async"]["staleness"]) and s["async"]["dropped_stale"] == 0
        assert sum(s["async"]["staleness"].values()) == 2 * SAMPLES
        for group in s["groups_trained"]:
            for i in range(SAMPLES):
                assert s["async"]["version_trained"] - min(versions[(group, i)]) <= 1
    r0_step = next(s for s in steps if first_r0 in s["groups_trained"])
    assert r0_step["step"] > 1 and r0_step["async"]["staleness"].get("1", 0) >= SAMPLES  # trained with lag 1
