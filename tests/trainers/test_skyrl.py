"""`trainer=skyrl`: the SkyRL / tinker SDK version table, its error text, and the server probe.

The probe is tested against a loopback HTTP server answering what SkyRL's Tinker API server
answers on `GET /` (NovaSky-AI/SkyRL, skyrl/tinker/api.py, `root()`, in the 0.3.0 and 0.4.x
releases: `{"name": "Tinker API Mock", "version": "0.0.1", "endpoints": {...}}`).
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from agentcore_rl_harness.config import compose_config
from agentcore_rl_harness.errors import ConfigError, HarnessError
from agentcore_rl_harness.trainers.registry import spec_for
from agentcore_rl_harness.trainers.skyrl import (
    PLACEHOLDER_VERSION,
    SkyRLTrainerConfig,
    build_trainer,
    check_versions,
    probe_server,
    required_tinker,
    server_version,
)

SKYRL_ROOT = {
    "name": "Tinker API Mock",
    "version": PLACEHOLDER_VERSION,
    "endpoints": {"training": ["/api/v1/forward_backward", "/api/v1/optim_step"],
                  "service": ["/api/v1/get_server_capabilities"]},
}


@pytest.fixture
def skyrl_root():
    """A loopback server answering `GET /` with `answer["body"]` (mutable per test)."""
    answer = {"body": SKYRL_ROOT, "status": 200}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            payload = json.dumps(answer["body"]).encode()
            self.send_response(answer["status"] if self.path == "/" else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", answer
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize(("skyrl", "tinker"), [
    ("0.4.0", ">=0.25,<0.26"), ("0.4.3", ">=0.25,<0.26"), ("0.3.0", "<=0.24.1"),
])
def test_known_pairs(skyrl, tinker):
    assert required_tinker(skyrl).tinker == tinker


@pytest.mark.parametrize("skyrl", ["0.2.9", "0.3.1", "0.5.0"])
def test_releases_without_a_known_sdk(skyrl):
    assert required_tinker(skyrl) is None
    with pytest.raises(ConfigError, match=f"runs skyrl {skyrl}, for which no working tinker SDK is known"):
        check_versions(server_version=skyrl, sdk_version="0.25.0", base_url="http://h:8000")


@pytest.mark.parametrize(("skyrl", "sdk"), [("0.4.1", "0.25.0"), ("0.4.1", "0.25.7"), ("0.3.0", "0.24.1"),
                                           ("0.3.0", "0.20.0")])
def test_matching_pairs_pass(skyrl, sdk):
    check_versions(server_version=skyrl, sdk_version=sdk, base_url="http://h:8000")


def test_mismatch_says_exactly_what_to_install():
    with pytest.raises(ConfigError) as caught:
        check_versions(server_version="0.4.1", sdk_version="0.38.0", base_url="http://h:8000")
    assert str(caught.value) == (
        "trainer=skyrl: the server at http://h:8000 runs skyrl 0.4.1, which needs tinker>=0.25,<0.26 "
        "(skyrl 0.4.x (Python >= 3.12) speaks tinker 0.25's API), but tinker 0.38.0 is installed here; "
        "pip install 'tinker>=0.25,<0.26' (in a separate environment from trainer=tinker, which needs "
        "tinker>=0.38,<0.39)"
    )
    with pytest.raises(ConfigError, match=r"pip install 'tinker<=0.24.1'"):
        check_versions(server_version="0.3.0", sdk_version="0.25.0", base_url="http://h:8000")


def test_probe_reads_skyrls_root_answer(skyrl_root):
    url, _ = skyrl_root
    info = probe_server(url)
    assert (info.name, info.version) == ("Tinker API Mock", "0.0.1")


def test_the_placeholder_version_needs_trainer_server_version(skyrl_root):
    url, answer = skyrl_root
    info = probe_server(url)
    with pytest.raises(ConfigError, match="set trainer.server_version to the version `pip show skyrl`"):
        server_version(SkyRLTrainerConfig(base_url=url), info)
    assert server_version(SkyRLTrainerConfig(base_url=url, server_version="0.4.1"), info) == "0.4.1"
    answer["body"] = {**SKYRL_ROOT, "version": "0.4.2"}
    reported = probe_server(url)
    assert server_version(SkyRLTrainerConfig(base_url=url), reported) == "0.4.2"
    with pytest.raises(ConfigError, match="reports version 0.4.2"):
        server_version(SkyRLTrainerConfig(base_url=url, server_version="0.3.0"), reported)


def test_an_unreachable_server_says_how_to_start_one(skyrl_root):
    url, answer = skyrl_root
    answer["status"] = 503
    with pytest.raises(HarnessError, match="python|skyrl.tinker.api"):
        probe_server(url)


def test_build_rejects_the_installed_sdk_before_creating_a_client(skyrl_root, monkeypatch):
    """tinker 0.38 is installed here: no SkyRL release is known to work with it."""
    import tinker

    url, _ = skyrl_root
    composed = compose_config(["trainer=skyrl", f"trainer.base_url={url}", "trainer.server_version=0.4.1"])
    with pytest.raises(ConfigError, match=f"tinker {tinker.__version__} is installed here"):
        build_trainer(section=composed.typed.trainer, model_dir=None, tokenizer=None, config=composed.typed)


def test_config_group_and_validation():
    assert spec_for("skyrl").kind == "service"
    with pytest.raises(ConfigError, match="needs trainer.base_url"):
        compose_config(["trainer=skyrl"])
    with pytest.raises(ConfigError, match="set trainer.max_grad_norm=null"):
        compose_config(["trainer=skyrl", "trainer.base_url=http://h:8000", "trainer.max_grad_norm=1.0"])
    with pytest.raises(ConfigError, match="not a version number"):
        SkyRLTrainerConfig(base_url="http://h:8000", server_version="latest")
    composed = compose_config(["trainer=skyrl", "trainer.base_url=http://h:8000", "trainer.server_version=0.3.0"])
    assert composed.typed.trainer.trainer.server_version == "0.3.0"
