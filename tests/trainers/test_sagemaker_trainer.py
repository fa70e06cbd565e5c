"""trainer=sagemaker against the real SDK (sagemaker-train 1.27) and real botocore.

No AWS account: the SDK's own endpoint overrides (`SAGEMAKER_TRAINING_SESSION_ENDPOINT`,
`SAGEMAKER_TRAINING_SESSION_RUNTIME_ENDPOINT`) point both botocore clients at `FakeSageMaker`, a
loopback HTTP server that speaks the two wire protocols (json 1.1 control plane, rest-json
runtime) and records every call. What the service itself computes (gradients, samples, model
packages) is canned here; the request path up to the socket is the real one.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

pytest.importorskip("sagemaker.train.training_session")

from agentcore_rl_harness.config import compose_config  # noqa: E402
from agentcore_rl_harness.errors import ConfigError, HarnessError, SamplingError  # noqa: E402
from agentcore_rl_harness.records import SamplingParams, Trace  # noqa: E402
from agentcore_rl_harness.trainers import TrainGroup, TrainSample  # noqa: E402
from agentcore_rl_harness.trainers.datum import token_datum  # noqa: E402
from agentcore_rl_harness.trainers.grpo import build_batch  # noqa: E402
from agentcore_rl_harness.trainers.registry import spec_for  # noqa: E402

ACCOUNT = "123456789012"
GROUP_ARN = f"arn:aws:sagemaker:us-west-2:{ACCOUNT}:model-package-group/arl-test"
BASE_MODEL = "arn:aws:sagemaker:us-west-2:aws:hub-content/SageMakerPublicHub/Model/test-model/1.0.0"
REQUIRED = [
    "trainer=sagemaker",
    "trainer.region=us-west-2",
    f"trainer.role_arn=arn:aws:iam::{ACCOUNT}:role/ArlTrainingSessions",
    f"trainer.model_package_group={GROUP_ARN}",
    "trainer.s3_output_path=s3://arl-bucket/out",
    f"trainer.base_model={BASE_MODEL}",
]


class FakeSageMaker:
    """Loopback stand-in for the SageMaker control plane and the training-session runtime."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict]] = []
        self.fail: set[str] = set()
        self.sample_sequence = {"stopReason": "length", "tokens": [5, 6, 7, 8], "logprobs": [-0.1, -0.2, -0.3, -0.4]}
        self._ops: dict[str, dict] = {}
        self._ids = itertools.count(1)
        self._packages = itertools.count(1)
        self.packages: dict[str, list[str]] = {}  # op -> model package ARNs it returned
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                target = self.headers.get("X-Amz-Target")
                if target:
                    self._reply(*fake.control(target.split(".", 1)[1], body))
                else:
                    self._reply(200, fake.submit(self.path, body))

            def do_GET(self):
                self._reply(200, fake.result(self.path))

            def _reply(self, status, payload):
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def record(self, operation: str, params: dict) -> None:
        with self._lock:
            self.calls.append((operation, params))

    def ops(self, name: str) -> list[dict]:
        return [params for operation, params in self.calls if operation == name]

    def control(self, operation: str, body: dict) -> tuple[int, dict]:
        self.record(operation, body)
        name = body.get("TrainingSessionName", "")
        if operation == "CreateTrainingSession":
            return 200, {"TrainingSessionArn": f"arn:aws:sagemaker:us-west-2:{ACCOUNT}:training-session/{name}"}
        if operation == "DescribeTrainingSession":
            return 200, {"TrainingSessionDetail": {"TrainingSessionName": name, "TrainingSessionStatus": "Running"}}
        if operation == "StopTrainingSession":
            if "StopTrainingSession" in self.fail:
                return 400, {"__type": "ThrottlingException", "message": "slow down"}
            return 200, {}
        return 400, {"__type": "ValidationException", "message": f"fake has no {operation}"}

    def submit(self, path: str, body: dict) -> dict:
        kind = "sampling" if path.endswith("/sampling-operations") else "training"
        (op, config), = body["operationConfig"].items()
        self.record(f"{kind}:{op}", body)
        op_id = f"op-{next(self._ids)}"
        with self._lock:
            self._ops[op_id] = {"op": op, "config": config}
        return {"operationId": op_id}

    def result(self, path: str) -> dict:
        op_id = path.rsplit("/", 1)[1]
        op = self._ops[op_id]
        self.record("poll", {"operationId": op_id})
        if op["op"] in self.fail:
            return {"status": "Failed", "errorDetails": f"{op['op']} failed in the fake"}
        return {"status": "Completed", "operationResult": {op["op"]: self._payload(op["op"], op["config"])}}

    def _payload(self, op: str, config: dict) -> dict:
        if op == "forwardBackward":
            outputs = [{"logprobs": datum["lossFnInputs"]["logprobs"]} for datum in config["datumList"]]
            return {"metrics": {"actor/pg_loss": 0.25, "actor/grad_norm": 1.5, "actor/pg_clipfrac": 0.125},
                    "lossFnOutputs": outputs}
        if op == "optimizerStep":
            return {"metrics": {"lr": config["adamParamsConfig"]["learningRate"]}}
        if op in ("saveWeights", "saveState"):
            arn = f"arn:aws:sagemaker:us-west-2:{ACCOUNT}:model-package/arl-test/{next(self._packages)}"
            self.packages.setdefault(op, []).append(arn)
            return {"modelPackageArn": arn}
        if op == "sample":
            return {"sequences": [self.sample_sequence]}
        return {}

    def env(self) -> dict[str, str]:
        return {
            "SAGEMAKER_TRAINING_SESSION_ENDPOINT": self.url,
            "SAGEMAKER_TRAINING_SESSION_RUNTIME_ENDPOINT": self.url,
            "AWS_ACCESS_KEY_ID": "AKIDTEST",
            "AWS_SECRET_ACCESS_KEY": "secret",
            "AWS_EC2_METADATA_DISABLED": "true",
            "AWS_CONFIG_FILE": os.devnull,
            "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
        }

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def fake(monkeypatch):
    server = FakeSageMaker()
    for key, value in server.env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    yield server
    server.close()


def _section(*extra):
    return compose_config([*REQUIRED, *extra]).typed.trainer


@pytest.fixture
def trainer(fake):
    built = spec_for("sagemaker").load_factory()(section=_section(), model_dir=None, tokenizer=None, config=None)
    yield built
    built.close()


def _trace(mask=(0, 1, 1, 1), logprob=-0.5):
    return Trace(token_ids=(1, 2, 3, 4, 5, 6), prompt_length=2, loss_mask=mask,
                 logprobs=tuple(logprob if m else None for m in mask), finish_reason="stop",
                 metadata={"policy_versions": [0]})


def _groups():
    return [TrainGroup("row-1", (TrainSample("a", 1.0, (_trace(),)), TrainSample("b", 0.0, (_trace(),)))),
            TrainGroup("row-2", (TrainSample("c", 1.0, (_trace(),)), TrainSample("d", 1.0, (_trace(),))))]


# -- config --------------------------------------------------------------------------------


def test_missing_required_keys_are_named_together():
    with pytest.raises(ConfigError) as error:
        compose_config(["trainer=sagemaker"])
    message = str(error.value)
    for key in ("trainer.region", "trainer.role_arn", "trainer.model_package_group", "trainer.s3_output_path",
                "trainer.base_model"):
        assert key in message


def test_composes_with_required_keys_and_rejects_bad_values():
    config = _section().trainer
    assert (config.kind, config.loss_fn, config.lora_rank, config.temperature) == ("sagemaker", "importance_sampling", 32, 1.0)
    assert _section("trainer.resume_model_package=arn:x", "trainer.base_model=null").trainer.base_model is None
    with pytest.raises(ConfigError, match="loss_fn='cispo'"):
        _section("trainer.loss_fn=cispo")
    with pytest.raises(ConfigError, match="model package group ARN"):
        _section("trainer.model_package_group=my-group")
    with pytest.raises(ConfigError, match="sampling.temperature=1.0"):
        _section("sampling.temperature=0.7")


@pytest.mark.parametrize("override, message", [
    ("algo.kl_coef=0.1", "algo.kl_coef=0.1"),
    ("algo.tis_cap=2.0", "algo.tis_cap=2.0"),
    ("algo.aggregation=seq_mean_token_sum", "algo.aggregation"),
])
def test_unsupported_algo_knobs_fail_before_any_session_is_created(fake, override, message):
    with pytest.raises(ConfigError, match=message):
        spec_for("sagemaker").load_factory()(section=_section(override), model_dir=None, tokenizer=None, config=None)
    assert fake.calls == []


# -- datum conversion ------------------------------------------------------------------------


def test_token_datum_becomes_the_sdks_datum_and_wire_shape():
    from sagemaker.train.training_session import Datum, TensorDtype
    from sagemaker.train.training_session._utils import batch_to_datum_list

    import sagemaker.train.training_session as sdk

    from agentcore_rl_harness.trainers.sagemaker import to_sdk_datum

    items, _ = build_batch(_groups()[:1], normalize_std=True)
    datum = to_sdk_datum(token_datum(items[0]), sdk)
    assert isinstance(datum, Datum)
    inputs = datum.loss_fn_inputs
    assert datum.model_input.to_ints() == [1, 2, 3, 4, 5]
    assert inputs["target_tokens"].data == [2, 3, 4, 5, 6] and inputs["target_tokens"].dtype is TensorDtype.INT64
    assert inputs["weights"].data == [0.0, 0.0, 1.0, 1.0, 1.0]
    assert inputs["logprobs"].data == [0.0, 0.0, -0.5, -0.5, -0.5]
    advantage = items[0].advantage
    assert inputs["advantages"].data == [0.0, 0.0, advantage, advantage, advantage]
    # The SDK's own validation (required keys for the loss, per-token lengths) accepts it.
    wire, = batch_to_datum_list([datum], loss_fn_name="ppo")
    assert wire["modelInput"] == {"chunks": [{"tokens": [1, 2, 3, 4, 5], "type": "encoded_text"}]}
    assert wire["lossFnInputs"]["target_tokens"] == {"data": [2, 3, 4, 5, 6], "dtype": "int64", "shape": [5]}


# -- the request path ------------------------------------------------------------------------


def test_start_creates_one_session_with_the_configured_values(fake, trainer):
    create, = fake.ops("CreateTrainingSession")
    assert create["TrainingSessionName"].startswith("agentcore-rl-")
    assert create["ModelPackageGroupArn"] == GROUP_ARN
    assert create["LoraConfig"] == {"Rank": 32, "Alpha": 64}
    assert create["RoleArn"] == f"arn:aws:iam::{ACCOUNT}:role/ArlTrainingSessions"
    assert create["ModelConfig"] == {"BaseModelArn": BASE_MODEL}
    assert create["OutputConfig"] == {"S3Location": {"Path": "s3://arl-bucket/out"}}
    assert fake.ops("DescribeTrainingSession")
    assert trainer.session_name == create["TrainingSessionName"] and trainer.policy_version == 0


def test_step_sends_forward_backward_optim_step_and_syncs_weights(fake, trainer):
    sampler = trainer.sampler
    old_client = sampler.sampling_client
    metrics = asyncio.run(trainer.step(groups=_groups()))

    fb, = fake.ops("training:forwardBackward")
    config = fb["operationConfig"]["forwardBackward"]
    assert config["lossFnName"] == "importance_sampling" and "lossFnConfig" not in config
    assert len(config["datumList"]) == 2  # row-2 has a constant reward: skipped
    assert set(config["datumList"][0]["lossFnInputs"]) == {"target_tokens", "weights", "logprobs", "advantages"}
    optim, = fake.ops("training:optimizerStep")
    assert optim["operationConfig"]["optimizerStep"]["adamParamsConfig"] == {
        "learningRate": 1e-4, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weightDecay": 0.0, "gradClipNorm": 1.0}
    assert [op["sequenceNumber"] for op in fake.ops("training:forwardBackward") + fake.ops("training:optimizerStep")
            + fake.ops("training:saveWeights")] == [1, 2, 3]
    load, = fake.ops("sampling:loadWeightsForSampling")
    assert load["operationConfig"]["loadWeightsForSampling"]["modelPackageArn"] == fake.packages["saveWeights"][-1]

    assert (metrics.step, metrics.policy_version, metrics.groups, metrics.groups_skipped) == (1, 1, 1, 1)
    assert metrics.trained_tokens == 6 and metrics.sequences == 2
    assert (metrics.loss, metrics.grad_norm, metrics.kl) == (0.25, 1.5, None)
    assert metrics.clip_fraction is None  # importance_sampling clips nothing
    assert metrics.sampler_kl == pytest.approx(0.0)  # the fake echoes the sampler's logprobs
    assert sampler.sampling_client is not old_client and sampler.policy_version == 1
    assert sampler.sampling_client.model_package_arn == load["operationConfig"]["loadWeightsForSampling"]["modelPackageArn"]


def test_ppo_sends_clip_thresholds_and_reports_clip_fraction(fake):
    trainer = spec_for("sagemaker").load_factory()(section=_section("trainer.loss_fn=ppo"), model_dir=None,
                                                    tokenizer=None, config=None)
    try:
        metrics = asyncio.run(trainer.step(groups=_groups()))
    finally:
        trainer.close()
    config = fake.ops("training:forwardBackward")[0]["operationConfig"]["forwardBackward"]
    assert config["lossFnName"] == "ppo"
    assert config["lossFnConfig"] == {"clip_low_threshold": pytest.approx(0.8), "clip_high_threshold": pytest.approx(1.28)}
    assert metrics.clip_fraction == 0.125


def test_a_step_with_nothing_to_train_calls_nothing(fake, trainer):
    before = len(fake.calls)
    metrics = asyncio.run(trainer.step(groups=_groups()[1:]))
    assert len(fake.calls) == before
    assert (metrics.policy_version, metrics.loss, metrics.grad_norm, metrics.groups_skipped) == (0, None, None, 1)


def test_sampler_samples_from_the_session_and_applies_max_tokens_and_stops(fake, trainer):
    asyncio.run(trainer.step(groups=_groups()))
    result = asyncio.run(trainer.sampler.sample(prompt_token_ids=[1, 2, 3], params=SamplingParams(max_tokens=3)))
    sample, = fake.ops("sampling:sample")
    config = sample["operationConfig"]["sample"]
    assert config["prompt"] == {"chunks": [{"tokens": [1, 2, 3], "type": "encoded_text"}]}
    assert config["samplingParams"] == {"maxTokens": 512, "temperature": 1.0, "topP": 1.0}
    assert config["numSamples"] == 1 and config["modelPackageArn"] == fake.packages["saveWeights"][-1]
    assert (result.token_ids, result.logprobs, result.finish_reason.value) == ((5, 6, 7), (-0.1, -0.2, -0.3), "length")
    assert result.policy_version == 1

    stopped = asyncio.run(trainer.sampler.sample(
        prompt_token_ids=[1], params=SamplingParams(max_tokens=600, stop_token_ids=(6,), top_k=5, seed=3)))
    assert (stopped.token_ids, stopped.finish_reason.value) == ((5, 6), "stop")
    params = fake.ops("sampling:sample")[1]["operationConfig"]["sample"]["samplingParams"]
    assert params == {"maxTokens": 600, "temperature": 1.0, "topP": 1.0, "topK": 5, "seed": 3}


def test_sampler_refuses_a_sample_without_logprobs(fake, trainer):
    fake.sample_sequence = {"stopReason": "stop", "tokens": [5, 6]}
    with pytest.raises(SamplingError, match="no logprobs"):
        asyncio.run(trainer.sampler.sample(prompt_token_ids=[1], params=SamplingParams()))


def test_checkpoint_round_trip_keeps_the_model_package_arn(fake, trainer, tmp_path):
    asyncio.run(trainer.step(groups=_groups()))
    trainer.save_checkpoint(tmp_path / "step-00001")
    state = json.loads((tmp_path / "step-00001" / "trainer_state.json").read_text())
    assert fake.ops("training:saveState")
    assert state["model_package_arn"] == fake.packages["saveState"][-1]
    assert state["step"] == 1 and state["policy_version"] == 1

    trainer.policy_version = trainer.step_count = 0
    assert trainer.load_checkpoint(tmp_path / "step-00001") == 1
    load, = fake.ops("training:loadState")
    assert load["operationConfig"]["loadState"] == {"modelPackageArn": state["model_package_arn"], "loadOptimizer": True}
    assert trainer.policy_version == 1 and trainer.sampler.policy_version == 1
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "trainer_state.json").write_text('{"format_version": 1, "step": 3}')
    with pytest.raises(HarnessError, match="not written by trainer=sagemaker"):
        trainer.load_checkpoint(tmp_path / "other")


def test_resume_model_package_starts_from_saved_state(fake):
    section = _section("trainer.resume_model_package=arn:aws:sagemaker:us-west-2:123456789012:model-package/arl-test/9")
    trainer = spec_for("sagemaker").load_factory()(section=section, model_dir=None, tokenizer=None, config=None)
    trainer.close()
    load, = fake.ops("training:loadState")
    assert load["operationConfig"]["loadState"]["modelPackageArn"].endswith("/arl-test/9")
    assert fake.ops("training:saveWeights") and fake.ops("StopTrainingSession")


# -- stop on every exit path ---------------------------------------------------------------


def test_close_stops_the_session_exactly_once(fake, trainer):
    trainer.close()
    trainer.close()
    stop, = fake.ops("StopTrainingSession")
    assert stop == {"TrainingSessionName": trainer.session_name}
    with pytest.raises(HarnessError, match="is stopped"):
        asyncio.run(trainer.step(groups=_groups()))


def test_a_failed_step_stops_the_session(fake, trainer):
    fake.fail.add("forwardBackward")
    with pytest.raises(HarnessError, match="the session was stopped"):
        asyncio.run(trainer.step(groups=_groups()))
    assert len(fake.ops("StopTrainingSession")) == 1
    trainer.close()
    assert len(fake.ops("StopTrainingSession")) == 1


def test_a_failed_stop_is_loud_and_names_the_manual_command(fake, trainer):
    fake.fail.add("StopTrainingSession")
    with pytest.raises(HarnessError, match="aws sagemaker stop-training-session --region us-west-2"):
        trainer.close()


def test_harness_close_stops_the_session(fake, tiny_model_dir):
    from agentcore_rl_harness.run.compose import Harness

    typed = compose_config([*REQUIRED, f"model.name={tiny_model_dir}"]).typed
    harness = Harness(typed)
    try:
        harness.start()
        assert harness.trainer().sampler is harness._sampler  # the gateway samples from the session
        assert not fake.ops("StopTrainingSession")
    finally:
        harness.close()
    assert len(fake.ops("StopTrainingSession")) == 1


SCRIPT = textwrap.dedent("""
    import sys, time
    from agentcore_rl_harness.config import compose_config
    from agentcore_rl_harness.trainers.registry import spec_for

    mode, overrides = sys.argv[1], sys.argv[2:]
    if mode == "plugin":
        from agentcore_rl_harness import interrupts
        interrupts.install()
    section = compose_config(overrides).typed.trainer
    trainer = spec_for("sagemaker").load_factory()(section=section, model_dir=None, tokenizer=None, config=None)
    if mode == "plugin":  # harness-like: the run's finally closes the trainer
        try:
            print("ready", flush=True)
            while True:
                time.sleep(0.05)
        except KeyboardInterrupt:
            print("interrupted", flush=True)
        finally:
            trainer.close()
        sys.exit(0)
    print("ready", flush=True)
    if mode == "atexit":
        sys.stdin.readline()
        sys.exit(0)  # no close(): the atexit hook must stop the session
    while True:  # mode default: nobody closes, SIGTERM's default action kills the process
        time.sleep(0.05)
""")


@pytest.mark.parametrize("mode, signal_number, returncode", [
    ("plugin", signal.SIGTERM, 0),
    ("plugin", signal.SIGINT, 0),
    ("default", signal.SIGTERM, -signal.SIGTERM),
    ("atexit", None, 0),
])
def test_a_harness_process_stops_its_session_on_signals_and_exit(fake, tmp_path, mode, signal_number, returncode):
    script = tmp_path / "harness_like.py"
    script.write_text(SCRIPT)
    env = {**os.environ, **fake.env()}
    process = subprocess.Popen([sys.executable, str(script), mode, *REQUIRED], env=env, stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout.readline().strip() == "ready", process.stderr.read()
        assert len(fake.ops("CreateTrainingSession")) == 1 and not fake.ops("StopTrainingSession")
        if signal_number is not None:
            process.send_signal(signal_number)
        out, err = process.communicate("exit\n", timeout=180)  # bounds a hang (a loaded 2-core box took 60 s+)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == returncode, err
    stop, = fake.ops("StopTrainingSession")
    assert stop["TrainingSessionName"] == fake.ops("CreateTrainingSession")[0]["TrainingSessionName"]
    if mode == "plugin":
        assert "interrupted" in out


def test_stop_request_matches_the_botocore_model(fake):
    """botocore's Stubber validates the StopTrainingSession request against the service model."""
    from botocore.stub import Stubber
    from sagemaker.train.training_session import ServiceClient, TrainingClient

    from agentcore_rl_harness.samplers.sagemaker import SageMakerSampler
    from agentcore_rl_harness.trainers.sagemaker import SageMakerTrainer

    config = _section()
    service = ServiceClient(region="us-west-2", role_arn=config.trainer.role_arn,
                            model_package_group_arn=GROUP_ARN, s3_output_path="s3://arl-bucket/out")
    client = TrainingClient("arl-stubbed", service._runtime, service_client=service)
    trainer = SageMakerTrainer(client, config=config.trainer, algo=config.algo,
                               sampler=SageMakerSampler(client.create_sampling_client()))
    with Stubber(service._sagemaker_client) as stubber:
        stubber.add_response("stop_training_session", {}, {"TrainingSessionName": "arl-stubbed"})
        trainer.close()
        trainer.close()
        stubber.assert_no_pending_responses()
    assert fake.calls == []
