"""`run/compose.py`: the composition root builds what it is not given, and uses what it is."""

import pytest
from run_fakes import FAST, RecordingTrainer, ask_gateway, make_spec

from agentcore_rl_harness.config import compose_config
from agentcore_rl_harness.errors import ConfigError
from agentcore_rl_harness.records import Status
from agentcore_rl_harness.run.cases import Case
from agentcore_rl_harness.run.compose import Harness, advertised_url, build_trainer, check_public_gateway_url
from agentcore_rl_harness.runtimes.fake import FakeRuntime


def test_a_case_runs_through_the_real_gateway_on_the_fakes(build_harness, tmp_path):
    harness = build_harness()
    spec = make_spec(tmp_path)
    episode = harness.submit(Case(spec=spec, row={"id": "r0", "question": "q"}, sample_index=0, phase="eval")).result(30)
    assert episode.outcome.status is Status.COMPLETED and episode.outcome.result == {"reply": "4"}
    (trace,) = episode.traces  # the agent's one turn, with the sampled tokens and their logprobs
    assert len(trace.logprobs) == len(trace.token_ids) - trace.prompt_length == sum(trace.loss_mask) > 0
    assert harness.runtime.sessions[0].base_url == harness.gateway.base_url == harness.advertised_url
    assert harness.model_id == "tiny-test" and harness.live_sessions() == 0


def test_given_parts_are_used_and_never_closed(build_harness):
    trainer = RecordingTrainer()
    trainer.close = lambda: pytest.fail("a given trainer is its owner's to close")
    harness = build_harness(trainer=trainer)
    harness.start()
    runtime, sampler = harness.runtime, harness.sampler
    assert harness.trainer() is trainer
    fixtures = harness.offline_fixtures()
    assert fixtures["gateway"] is harness.gateway and fixtures["backend"].model_name == "tiny-test"
    assert fixtures["agentcore_rl_config"] is harness.config
    harness.close()
    assert not runtime.closed and sampler.calls == []


class NotingRuntime(FakeRuntime):
    """A runtime with a note on every set of tasks (as ACR has on runtime.limits)."""

    def notes(self, *, agents):
        return [f"cannot apply the settings of {len(agents)} tasks"]


def test_started_is_the_started_harness_and_only_notes_on_tasks_it_is_given(scripted_harness, tmp_path):
    harness = scripted_harness(FAST, runtime=NotingRuntime(ask_gateway))
    with pytest.raises(TypeError, match=r"started\(specs\) needs write="):
        harness.started([make_spec(tmp_path)])
    assert harness.gateway is None  # refused before anything started
    assert harness.started() is harness and harness.gateway is not None  # no tasks: nothing to note
    written = []
    assert harness.started([make_spec(tmp_path)], write=written.append) is harness
    assert written == ["agentcore-rl: cannot apply the settings of 1 tasks"]


def test_an_external_sampler_needs_its_tokenizer():
    config = compose_config(FAST).typed
    with pytest.raises(ConfigError, match="needs the tokenizer"):
        Harness(config, sampler=object())


def test_external_trainers_say_what_to_run_instead():
    config = compose_config([*FAST, "trainer=verl"]).typed
    with pytest.raises(ConfigError, match="verl"):
        build_trainer(config, model=None, sampler=None)


def test_the_url_agents_get_public_url_first_and_agentcore_refuses_loopback():
    local = compose_config([*FAST, "gateway.public_url=http://10.0.0.5:8000/v1"]).typed
    assert advertised_url(local, "http://127.0.0.1:9/v1") == "http://10.0.0.5:8000/v1"
    acr = compose_config([*FAST, "runtime=agentcore"]).typed
    with pytest.raises(ConfigError, match="AgentCore cannot reach"):
        advertised_url(acr, "http://127.0.0.1:9/v1")
    assert check_public_gateway_url("https://gw.example.com/v1") == "https://gw.example.com/v1"


def test_the_train_plan_is_the_configs_loop(build_harness):
    plan = build_harness("trainer.steps=3", "trainer.batch_rows=2", "algo.group_size=4", "seed=5").train_plan()
    assert (plan.steps, plan.batch_rows, plan.group_size, plan.seed) == (3, 2, 4, 5)
