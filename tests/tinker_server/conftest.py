import pytest

API_KEY = "tml-test-key"


@pytest.fixture(scope="module")
def tinker_server(tmp_path_factory):
    """One `tiny` server per module: an API key, a small body limit, and a short long-poll so
    results that take a moment are fetched through try_again."""
    pytest.importorskip("tinker")
    from agentcore_rl_harness.tinker_server import TinkerServer

    with TinkerServer("tiny", api_key=API_KEY, checkpoint_dir=tmp_path_factory.mktemp("tinker-ckpt"),
                      max_models=8, max_body_bytes=1024 * 1024, poll_wait_s=0.05) as server:
        yield server


@pytest.fixture(scope="module")
def service_client(tinker_server):
    import tinker

    client = tinker.ServiceClient(base_url=tinker_server.base_url, api_key=API_KEY)
    yield client
    client.close("success").result(timeout=30)


@pytest.fixture(scope="module")
def tokenizer(tinker_server):
    return tinker_server.engine.tokenizer


@pytest.fixture(scope="module")
def base_model(tinker_server):
    """A plain torch copy of the served base model, for recomputing logprobs."""
    from agentcore_rl_harness.models import load_model

    return load_model(tinker_server.engine.model_path)
