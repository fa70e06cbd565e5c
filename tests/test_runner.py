"""Whose fault a failed session is: `runner.attribute_failure` over the gateway's session events."""

import pytest

from agentcore_rl_harness.records import SessionOutcome, Status
from agentcore_rl_harness.run.episodes import attribute_failure


def _outcome(status=Status.AGENT_ERROR, error="agent: HTTP 400 from the model"):
    return SessionOutcome(status=status, result=None, error=error, elapsed_s=1.0)


@pytest.mark.parametrize("status", [Status.AGENT_ERROR, Status.TIMEOUT])
def test_a_failure_after_a_gateway_5xx_is_an_infra_error(status):
    outcome = attribute_failure(_outcome(status), {"gateway_errors": 2})
    assert outcome.status is Status.INFRA_ERROR
    assert "the gateway failed 2 request(s)" in outcome.error and "HTTP 400" in outcome.error


@pytest.mark.parametrize("metadata", [
    {"context_length_exceeded": 1},
    {"context_length_exceeded": 1, "gateway_errors": 1},  # its own overflow came first or too
    {"context_budget_exhausted": 3},
])
def test_a_failure_after_the_agent_overflowed_its_context_stays_the_agents(metadata):
    outcome = attribute_failure(_outcome(), metadata)
    assert outcome.status is Status.AGENT_ERROR
    assert outcome.error.startswith("agent: HTTP 400 from the model")
    assert "refused this session's requests" in outcome.error


@pytest.mark.parametrize("status", [Status.COMPLETED, Status.TASK_FAILED, Status.INFRA_ERROR])
def test_other_statuses_are_left_alone(status):
    outcome = _outcome(status)
    assert attribute_failure(outcome, {"gateway_errors": 1}) is outcome


def test_a_plain_agent_failure_stays_as_it_was():
    outcome = _outcome()
    assert attribute_failure(outcome, {"turns": 3}) is outcome
