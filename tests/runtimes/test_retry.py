"""The resend policy shared by InvokeAgentRuntime and StopRuntimeSession."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from agentcore_rl_harness.runtimes._retry import Backoff, GaveUp, retry_call


@dataclass(frozen=True)
class Failure:
    retryable: bool
    code: str


class Throttled(Exception):
    pass


class Broken(Exception):
    pass


def classify(exc: Exception) -> Failure | None:
    if isinstance(exc, Throttled):
        return Failure(retryable=True, code="ThrottlingException")
    if isinstance(exc, Broken):
        return Failure(retryable=False, code="InternalServerException")
    return None


class Script:
    """A call that raises the scripted exceptions in turn, then returns "done"."""

    def __init__(self, *errors: Exception) -> None:
        self.errors = list(errors)
        self.calls = 0

    async def __call__(self) -> str:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return "done"


class Sleeps(list):
    async def __call__(self, seconds: float) -> None:
        self.append(seconds)


def test_waits_double_up_to_the_cap_with_jitter_in_the_upper_half():
    backoff = Backoff(attempts=5, initial_s=0.5, max_s=3.0)
    top = backoff.waits(uniform=lambda low, high: high)
    assert [next(top) for _ in range(5)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    bottom = backoff.waits(uniform=lambda low, high: low)
    assert [next(bottom) for _ in range(3)] == [0.25, 0.5, 1.0]
    assert all(0.25 <= next(backoff.waits()) <= 0.5 for _ in range(20))


@pytest.mark.asyncio
async def test_retryable_failures_are_resent_until_the_call_succeeds():
    call, sleeps, retries = Script(Throttled(), Throttled()), Sleeps(), []
    result = await retry_call(
        call,
        backoff=Backoff(attempts=5, initial_s=1.0, max_s=8.0),
        classify=classify,
        on_retry=lambda failure, next_attempt: retries.append((failure.code, next_attempt)),
        sleep=sleeps,
    )
    assert result == "done" and call.calls == 3
    assert retries == [("ThrottlingException", 2), ("ThrottlingException", 3)]
    assert len(sleeps) == 2 and 0.5 <= sleeps[0] <= 1.0 and 1.0 <= sleeps[1] <= 2.0


@pytest.mark.asyncio
async def test_running_out_of_attempts_gives_up_with_the_count():
    call, sleeps = Script(*(Throttled() for _ in range(5))), Sleeps()
    with pytest.raises(GaveUp) as caught:
        await retry_call(
            call, backoff=Backoff(attempts=3, initial_s=0.1, max_s=1.0), classify=classify,
            sleep=sleeps,
        )
    assert caught.value.attempts == 3 and caught.value.failure.code == "ThrottlingException"
    assert call.calls == 3 and len(sleeps) == 2


@pytest.mark.asyncio
async def test_a_failure_that_may_not_be_resent_gives_up_at_once():
    call, sleeps, retries = Script(Throttled(), Broken()), Sleeps(), []
    with pytest.raises(GaveUp) as caught:
        await retry_call(
            call, backoff=Backoff(attempts=5, initial_s=0.1, max_s=1.0), classify=classify,
            on_retry=lambda failure, next_attempt: retries.append(next_attempt), sleep=sleeps,
        )
    assert caught.value.attempts == 2 and caught.value.failure.code == "InternalServerException"
    assert call.calls == 2 and retries == [2] and len(sleeps) == 1


@pytest.mark.asyncio
async def test_an_unknown_exception_propagates_unchanged_and_is_not_resent():
    error = KeyError("not an AWS error")
    call, sleeps = Script(error), Sleeps()
    with pytest.raises(KeyError) as caught:
        await retry_call(
            call, backoff=Backoff(attempts=5, initial_s=0.1, max_s=1.0), classify=classify,
            sleep=sleeps,
        )
    assert caught.value is error and call.calls == 1 and sleeps == []


@pytest.mark.asyncio
async def test_one_attempt_means_no_resend():
    call = Script(Throttled())
    with pytest.raises(GaveUp) as caught:
        await retry_call(
            call, backoff=Backoff(attempts=1, initial_s=0.1, max_s=1.0), classify=classify,
            sleep=Sleeps(),
        )
    assert caught.value.attempts == 1 and call.calls == 1
