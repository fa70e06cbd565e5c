"""`judges/service.py` with the real `openai` client against a scripted judge on loopback: retries
after malformed answers, `JudgeError` after the last, the answer cache across service instances
(a rescore or a resumed run), one call per group, the concurrency limit, and usage lines."""

import asyncio
import json
import threading
import time

import pytest
from judge_server import ScriptedJudgeServer

from agentcore_rl_harness.errors import JudgeError
from agentcore_rl_harness.judges.clients import OpenAIJudge, identity
from agentcore_rl_harness.judges.config import JudgeConfig, PriceTable
from agentcore_rl_harness.judges.service import JudgeService


def _service(server, tmp_path, monkeypatch, **config):
    monkeypatch.setenv("JUDGE_KEY", "sk-test")
    judge = JudgeConfig(kind="openai", model="judge-1", base_url=server.base_url, api_key_env="JUDGE_KEY", **config)
    return JudgeService(judge, identity=identity(judge, policy_model=None), client=lambda: OpenAIJudge(judge),
                        cache_dir=tmp_path / "judge", usage_dir=tmp_path / "judge")


def _usage(tmp_path):
    return [json.loads(line) for line in (tmp_path / "judge" / "usage.jsonl").read_text().splitlines()]


def test_a_malformed_answer_is_quoted_back_and_asked_again(tmp_path, monkeypatch):
    with ScriptedJudgeServer(["I think it deserves a 1.", '{"score": 0.75, "reason": "mostly"}']) as server:
        service = _service(server, tmp_path, monkeypatch, price=PriceTable(prompt_per_mtok=2.0, completion_per_mtok=10.0))
        assert asyncio.run(service.score(rubric="is it right", transcript="the work")) == 0.75
    first, second = server.requests
    assert first["auth"] == "Bearer sk-test" and first["model"] == "judge-1" and first["temperature"] == 0.0
    assert second["messages"][-2] == {"role": "assistant", "content": "I think it deserves a 1."}
    assert "could not be read: it is not one JSON object" in second["messages"][-1]["content"]
    line, = _usage(tmp_path)
    assert (line["attempts"], line["failed_attempts"], line["ok"], line["cached"]) == (2, 1, True, False)
    assert line["completion_tokens"] == 6 + 4 and line["prompt_tokens"] > 0  # both attempts are paid for
    assert line["cost_usd"] == pytest.approx((2.0 * line["prompt_tokens"] + 10.0 * 10) / 1e6)


def test_malformed_after_every_retry_is_a_judge_error_not_a_zero(tmp_path, monkeypatch):
    with ScriptedJudgeServer(["no json here"]) as server:
        service = _service(server, tmp_path, monkeypatch, retries=2)
        with pytest.raises(JudgeError, match=r"no usable score in 3 attempt\(s\).*malformed answer 'no json here'"):
            asyncio.run(service.score(rubric="r", transcript="t"))
    assert len(server.requests) == 3
    line, = _usage(tmp_path)
    assert (line["ok"], line["attempts"], line["failed_attempts"]) == (False, 3, 3)
    assert not (tmp_path / "judge" / "cache.jsonl").exists()  # a failure is never cached


def test_a_failing_endpoint_is_retried_then_a_judge_error(tmp_path, monkeypatch):
    with ScriptedJudgeServer(["{}"], status=503) as server:
        service = _service(server, tmp_path, monkeypatch, retries=1)
        with pytest.raises(JudgeError, match="InternalServerError"):
            asyncio.run(service.score(rubric="r", transcript="t"))
    assert len(server.requests) == 2


def test_the_cache_answers_a_question_asked_before_even_in_a_new_process(tmp_path, monkeypatch):
    with ScriptedJudgeServer(['{"score": 1, "reason": "ok"}', '{"score": 0, "reason": "other"}']) as server:
        first = _service(server, tmp_path, monkeypatch)
        assert asyncio.run(first.score(rubric="r", transcript="t")) == 1.0
        again = _service(server, tmp_path, monkeypatch)  # a rescore / resumed run: a new service, same RUN_DIR
        assert asyncio.run(again.score(rubric="r", transcript="t")) == 1.0
        assert len(server.requests) == 1 and again.calls == 0
        assert asyncio.run(again.score(rubric="r", transcript="another transcript")) == 0.0  # a new question pays
        assert asyncio.run(again.score(rubric="another rubric", transcript="t")) == 0.0
    assert len(server.requests) == 3
    assert [line["cached"] for line in _usage(tmp_path)] == [False, True, False, False]


def test_a_group_is_one_call_and_each_attempt_gets_its_own_score(tmp_path, monkeypatch):
    answer = '{"scores": [{"id": 1, "score": 0.2}, {"id": 2, "score": 1.0}, {"id": 3, "score": 0.6}]}'
    with ScriptedJudgeServer([answer]) as server:
        service = _service(server, tmp_path, monkeypatch)

        async def everyone():
            return await asyncio.gather(*(service.score_group(rubric="r", transcripts=["a", "b", "c"], index=i)
                                          for i in range(3)))

        assert asyncio.run(everyone()) == [0.2, 1.0, 0.6]
    assert len(server.requests) == 1
    assert "=== Attempt 3 ===\nc" in server.requests[0]["messages"][1]["content"]
    assert _usage(tmp_path)[0]["group_size"] == 3


def test_at_most_concurrency_calls_are_in_flight(tmp_path, monkeypatch):
    live, peak, lock = [0], [0], threading.Lock()

    def slow(body):
        with lock:
            live[0] += 1
            peak[0] = max(peak[0], live[0])
        time.sleep(0.1)
        with lock:
            live[0] -= 1
        return '{"score": 1}'

    with ScriptedJudgeServer(slow) as server:
        service = _service(server, tmp_path, monkeypatch, concurrency=2)

        async def many():
            return await asyncio.gather(*(service.score(rubric="r", transcript=f"t{i}") for i in range(6)))

        assert asyncio.run(many()) == [1.0] * 6
    assert peak[0] == 2 and len(server.requests) == 6
