"""Sessions whose client died (no heartbeat, no call) are finished and their models freed, so a
long-lived `agentcore-rl tinker-server` does not run out of model slots."""

import time

import httpx
import pytest


def _post(server, path, body):
    return httpx.post(f"{server.base_url}/api/v1/{path}", json=body, timeout=30)


def _create_model(server, session_id):
    response = _post(server, "create_model", {"session_id": session_id, "model_seq_id": 0, "base_model": "tiny",
                                              "lora_config": {"rank": 4}})
    assert response.status_code == 200, response.text
    request_id = response.json()["request_id"]
    for _ in range(200):
        result = _post(server, "retrieve_future", {"request_id": request_id})
        if result.json().get("type") != "try_again":
            return result
    raise AssertionError("create_model never finished")


def test_a_silent_session_is_reaped_when_the_next_one_arrives(tmp_path):
    pytest.importorskip("tinker")
    from agentcore_rl_harness.tinker_server import TinkerServer

    with TinkerServer("tiny", checkpoint_dir=tmp_path, max_models=1, poll_wait_s=0.05,
                      session_timeout_s=0.5) as server:
        dead = _post(server, "create_session", {}).json()["session_id"]
        assert _create_model(server, dead).status_code == 200
        assert len(server.engine.models) == 1  # the only slot is taken

        live = _post(server, "create_session", {}).json()["session_id"]  # too soon: nothing reaped
        assert _post(server, "session_heartbeat", {"session_id": dead}).status_code == 200
        time.sleep(0.8)
        assert _post(server, "session_heartbeat", {"session_id": live}).status_code == 200
        # `dead` stayed silent past the timeout; creating a model reaps it and takes the slot
        assert _create_model(server, live).json()["model_id"] == f"{live}:train:0"
        assert [model.session_id for model in server.engine.models.values()] == [live]
        gone = _post(server, "session_heartbeat", {"session_id": dead})
        assert gone.status_code == 410 and "is finished" in gone.json()["error"]

