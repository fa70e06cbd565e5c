"""`run/episodes.py`: one case -> one episode, over a recording session store and FakeRuntime."""

import asyncio
from types import SimpleNamespace

import pytest

from agentcore_rl_harness.errors import HarnessError
from agentcore_rl_harness.records import SamplingParams, SessionOutcome, Status, Usage
from agentcore_rl_harness.run.cases import Case
from agentcore_rl_harness.run.episodes import EpisodeRunner, CaseSettings, attribute_failure
from agentcore_rl_harness.runtimes.fake import FakeRuntime

from run_fakes import make_spec


class Sessions:
    """A gateway session store that records what was opened and finished."""

    def __init__(self, metadata=None):
        self.opened, self.finished = {}, []
        self.metadata = metadata or {}

    def open(self, *, session_id, sampling):
        self.opened[session_id] = sampling

    def finish(self, session_id):
        self.finished.append(session_id)
        return SimpleNamespace(traces=(), turns=2, usage=Usage(prompt_tokens=3, completion_tokens=4),
                               metadata=dict(self.metadata))


def _runner(handler, sessions=None, **settings):
    base = dict(model_id="m", base_url="http://gw/v1", sampling=SamplingParams(max_tokens=9), seed=7)
    return EpisodeRunner(sessions=sessions or Sessions(), runtime=FakeRuntime(handler),
                      settings=CaseSettings(**{**base, **settings}))


def _cases(tmp_path, count=2, **task):
    spec = make_spec(tmp_path, **task)
    return [Case(spec=spec, row={"id": f"r{i}", "question": "q"}, sample_index=i, phase="eval") for i in range(count)]


def test_a_case_is_one_session_with_the_rollout_block_and_its_own_seed(tmp_path):
    sessions = Sessions()
    runner = _runner(lambda s: {"ok": s.payload["question"]}, sessions)
    cases = _cases(tmp_path)
    episodes = [asyncio.run(runner.run(case)) for case in cases]
    assert [e.outcome.result for e in episodes] == [{"ok": "q"}, {"ok": "q"}]
    assert [e.case for e in episodes] == cases and (episodes[0].turns, episodes[0].usage.completion_tokens) == (2, 4)
    rollout = runner.runtime.sessions[0].payload["_rollout"]
    assert (rollout["base_url"], rollout["model_id"], rollout["sampling_params"]["max_tokens"]) == ("http://gw/v1", "m", 9)
    assert rollout["api_key"] == episodes[0].session_id == runner.runtime.sessions[0].session_id
    seeds = [sessions.opened[e.session_id].seed for e in episodes]
    assert None not in seeds and seeds[0] != seeds[1]  # seeded per case, stable across runs
    assert sessions.finished == [e.session_id for e in episodes]


@pytest.mark.parametrize("phase, greedy", [("eval", True), ("pre", True), ("warmup", True), ("post", True),
                                           ("train", False), ("collect", False)])
def test_eval_temperature_samples_evaluation_phases_only(tmp_path, phase, greedy):
    sessions = Sessions()
    runner = _runner(lambda s: {"ok": 1}, sessions, sampling=SamplingParams(temperature=0.7, max_tokens=9),
                     eval_sampling=SamplingParams(temperature=0.0, max_tokens=9))
    case = Case(spec=make_spec(tmp_path), row={"id": "r0", "question": "q"}, sample_index=0, phase=phase)
    episode = asyncio.run(runner.run(case))
    opened = sessions.opened[episode.session_id]
    sent = runner.runtime.sessions[0].payload["_rollout"]["sampling_params"]
    assert (opened.temperature, sent["temperature"]) == ((0.0, 0.0) if greedy else (0.7, 0.7))
    assert opened.max_tokens == 9 and opened.seed is not None


def test_a_bad_payload_fails_the_task_and_a_runtime_error_is_infrastructure(tmp_path):
    def bad_payload(row):
        raise KeyError("no such field")

    spec = make_spec(tmp_path)
    import dataclasses

    broken = Case(spec=dataclasses.replace(spec, payload=bad_payload), row={"id": "r0"}, sample_index=0, phase="eval")
    sessions = Sessions()
    episode = asyncio.run(_runner(lambda s: {}, sessions).run(broken))
    assert episode.outcome.status is Status.TASK_ERROR and "building the invoke payload failed" in episode.outcome.error
    assert sessions.finished == [episode.session_id]  # the gateway session is finished regardless

    def down(session):
        raise HarnessError("no capacity")

    episode = asyncio.run(_runner(down).run(_cases(tmp_path, 1)[0]))
    assert episode.outcome.status is Status.INFRA_ERROR and "no capacity" in episode.outcome.error


def test_a_failure_after_a_gateway_error_is_infrastructure_not_the_agents(tmp_path):
    def crash(session):
        raise RuntimeError("the model did not answer")

    episode = asyncio.run(_runner(crash, Sessions({"gateway_errors": 1})).run(_cases(tmp_path, 1)[0]))
    assert episode.outcome.status is Status.INFRA_ERROR and "the gateway failed 1 request" in episode.outcome.error
    own = attribute_failure(SessionOutcome(Status.AGENT_ERROR, None, "x", 0.0),
                            {"gateway_errors": 2, "context_length_exceeded": 1})
    assert own.status is Status.AGENT_ERROR and "context_length_exceeded x1" in own.error


def test_no_more_than_concurrency_sessions_run_at_once(tmp_path):
    live, peak = [0], [0]

    async def handler(session):
        live[0] += 1
        peak[0] = max(peak[0], live[0])
        await asyncio.sleep(0.01)
        live[0] -= 1
        return {}

    runner = _runner(handler, concurrency=2)

    async def all_cases():
        return await asyncio.gather(*(runner.run(case) for case in _cases(tmp_path, 6)))

    assert len(asyncio.run(all_cases())) == 6 and peak[0] == 2


def test_what_an_episode_holds_is_released_once_scored_or_when_the_runner_closes(tmp_path):
    released = []
    runner = _runner(lambda s: {})

    async def scenario():
        first, second = [await runner.run(case) for case in _cases(tmp_path, 2)]
        for name, episode in (("first", first), ("second", second)):
            async def aclose(name=name):
                released.append(name)
            episode.held.hold(aclose)
            runner._held.append(episode.held)  # as a runtime that keeps the sandbox registers it
        await first.held.release()
        await runner.release_all()
        await runner.release_all()

    asyncio.run(scenario())
    assert released == ["first", "second"]


@pytest.mark.parametrize("agent", ["oracle"])
def test_the_oracle_agent_gets_the_rows_reference_result(tmp_path, agent):
    import agentcore_rl_harness as arl
    from agentcore_rl_harness.tasks import task_spec

    spec = task_spec(arl.task(dataset="d.jsonl", oracle="answer")(lambda rollout, row: None))
    runner = _runner(lambda s: {"got": s.payload["_rollout"]}, agent=agent)
    episode = asyncio.run(runner.run(Case(spec=spec, row={"id": "r0", "answer": 4}, sample_index=0, phase="eval")))
    assert {"answer": 4} in episode.outcome.result["got"].values()
    assert runner.runtime.sessions[0].agent.agent != spec.agent_path()
