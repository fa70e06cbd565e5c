"""Every trainer adapter turns the same scored rollouts into batches with the same invariants.

One fixed set of rollouts (`ROLLOUTS`): multi-turn traces whose loss mask has 0-runs for tool
output, a rollout that forked into two traces sharing a prefix, a constant-reward group, and a
group with a timed-out rollout. Each adapter turns them into its REAL batch objects, through its
own entry point, and each batch is mapped back to one `TraceView` per trained trace:

- local: the tensors `LocalTrainer._tensors` hands the loss during a real `step_sync` on the tiny
  model (rows, positions and targets say which logits are trained and against which token);
- tinker: the `tinker.Datum`s a real `TinkerTrainer.step` sends to `forward_backward`;
- sagemaker: the SDK `Datum`s a real `SageMakerTrainer.step_sync` sends to `forward_backward`;
- verl: the `AgentLoopOutput`s of `AgentCoreRLAgentLoop.run`, advantages by verl's own GRPO
  estimator (`compute_grpo_outcome_advantage`, reward at the last response token as verl puts it);
- slime: the samples of `play_groups`, advantages by `post_process_rewards` (slime's GRPO
  broadcasts a sample's normalised reward over its response tokens).

The invariants, checked for all: (1) the prompt/response split is the trace's; (2) the mask is 1
exactly on sampled tokens (0 on prompt and tool output); (3) every trained token carries its
rollout's advantage; (4) a forked rollout counts once in its group's statistics and its traces
share its advantage; (5) the sampler's logprobs reach the batch unchanged on trained tokens.

Where the adapters differ by design, the expectation says so (`Conformance`):
- The runner-driven trainers (local, tinker, sagemaker) skip a constant-reward group; verl and
  slime compute advantages in the framework and keep it, with advantage 0 on every token.
- verl trains ONE trace per rollout (`trace_choice=most_trained`; it stacks one output per
  sample), so a forked rollout's other trace is absent, counted in `extra_fields`.
- verl normalises by the unbiased std (`torch.std`), the harness's GRPO (and `post_process_rewards`
  for slime) by the population std: verl's advantages are the harness's times sqrt(n / (n - 1)).
- Failed rollouts: the runner leaves them out of their group for local / tinker / sagemaker
  (`training.build_groups`), slime drops them (`failure_policy=drop`, counted), verl raises
  (`failure_policy=raise`, verl cannot drop a sample: its step would stop); the verl view holds the
  outputs of the samples that did finish.
- tinker.Datum carries neither a mask nor the prompt length: a token is trained where it carries
  the sampler's logprob (the adapter writes 0.0 elsewhere; every fixture logprob is < 0), the split
  is the first trained token (every fixture trace starts its response with a sampled token), and
  the advantages are scaled by 1 / (trained tokens in the step) for token_mean aggregation.

`trainer=skyrl` is the tinker adapter (`TinkerTrainer`) against another server: the same batch.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace

import pytest

from agentcore_rl_harness.errors import HarnessError
from agentcore_rl_harness.records import Rollout, Status, Trace, Usage
from agentcore_rl_harness.run.training import build_groups

# -- the fixture: scored rollouts as the runner records them -----------------------------------------

SYSTEM = (100, 101, 102, 103, 104, 105)
QUESTIONS = {"r0": (200, 201), "r1": (300, 301), "r2": (400, 401)}
SAMPLED, TOOL = 1, 0


def logprob(token: int) -> float:
    """A distinct, strictly negative sampler logprob per token id."""
    return -(token % 97 + 1) / 100


def trace(prompt: tuple[int, ...], *segments: tuple[int, tuple[int, ...]]) -> Trace:
    """A trace from its prompt and (SAMPLED | TOOL, tokens) segments after it."""
    tokens = [token for _, run in segments for token in run]
    mask = [kind for kind, run in segments for _ in run]
    return Trace(
        token_ids=tuple(prompt) + tuple(tokens),
        prompt_length=len(prompt),
        loss_mask=tuple(mask),
        logprobs=tuple(logprob(t) if m else None for t, m in zip(tokens, mask)),
        finish_reason="stop",
    )


def rollout(row: str, index: int, session: str, reward: float | None, *traces: Trace,
            status: Status = Status.COMPLETED) -> Rollout:
    return Rollout(
        run_id="conformance", task="calc", row_id=row, sample_index=index, group_id=f"calc/{row}/train",
        phase="train", step=0, session_id=session, status=status,
        error=None if status is Status.COMPLETED else "the agent timed out", reward=reward,
        rewards={} if reward is None else {"correct": reward}, success=reward == 1.0 if reward is not None else None,
        result={}, turns=len(traces), usage=Usage(), elapsed_s=1.0, traces=traces,
    )


def prompt(row: str) -> tuple[int, ...]:
    return SYSTEM + QUESTIONS[row]


FORK_PREFIX = prompt("r0") + (1101, 1102, 1103)
ROLLOUTS = (
    # r0: rewards 1.0 / 0.0 / 0.5; a1 forked (its second trace re-prompts with the first turn + glue).
    rollout("r0", 0, "a0", 1.0, trace(prompt("r0"), (SAMPLED, (1001, 1002, 1003)), (TOOL, (1004, 1005, 1006, 1007)),
                                      (SAMPLED, (1008, 1009, 1010)))),
    rollout("r0", 1, "a1", 0.0,
            trace(prompt("r0"), (SAMPLED, (1101, 1102, 1103)), (TOOL, (1104, 1105)), (SAMPLED, (1106, 1107))),
            trace(FORK_PREFIX + (1190, 1191), (SAMPLED, (1111, 1112, 1113, 1114)), (TOOL, (1115,)),
                  (SAMPLED, (1116, 1117)))),
    rollout("r0", 2, "a2", 0.5, trace(prompt("r0"), (SAMPLED, (1201, 1202)))),
    # r1: constant reward, teaches nothing.
    rollout("r1", 0, "b0", 1.0, trace(prompt("r1"), (SAMPLED, (2001, 2002)), (TOOL, (2003,)), (SAMPLED, (2004,)))),
    rollout("r1", 1, "b1", 1.0, trace(prompt("r1"), (SAMPLED, (2101, 2102, 2103)))),
    # r2: one rollout timed out after sampling a turn; it must not count as reward 0.
    rollout("r2", 0, "c0", 1.0, trace(prompt("r2"), (SAMPLED, (3001, 3002)), (TOOL, (3003, 3004)), (SAMPLED, (3005,)))),
    rollout("r2", 1, "c1", 0.0, trace(prompt("r2"), (SAMPLED, (3101, 3102, 3103)))),
    rollout("r2", 2, "c2", None, trace(prompt("r2"), (SAMPLED, (3201, 3202)), (TOOL, (3203,))),
            status=Status.TIMEOUT),
)
BY_SESSION = {r.session_id: r for r in ROLLOUTS}
FAILED = "c2"
FORKED = "a1"
CONSTANT_GROUP = ("b0", "b1")


# -- the common view --------------------------------------------------------------------------------


@dataclass(frozen=True)
class TraceView:
    """One trained trace as any adapter's batch describes it, over the full token sequence."""

    rollout: str
    """The rollout's session id."""
    token_ids: tuple[int, ...]
    prompt_length: int
    trained: tuple[int, ...]
    """1 where the token enters the loss."""
    logprobs: tuple[float | None, ...]
    """The sampler's logprob on trained tokens, None elsewhere."""
    advantages: tuple[float, ...]
    """Per token, as the loss weighs it (0 where not trained)."""


def _view(rollout_key: str, token_ids, prompt_length: int, trained, logprobs, advantages) -> TraceView:
    trained = tuple(int(bool(m)) for m in trained)
    return TraceView(
        rollout=rollout_key, token_ids=tuple(int(t) for t in token_ids), prompt_length=int(prompt_length),
        trained=trained, logprobs=tuple(float(lp) if m else None for lp, m in zip(logprobs, trained)),
        advantages=tuple(float(a) for a in advantages),
    )


def _from_shifted(rollout_key: str, inputs, targets, trained, logprobs, advantages) -> TraceView:
    """A view from the input/target layout (target i is token i + 1; token 0 is never a target)."""
    inputs, targets = list(inputs), list(targets)
    assert targets[:-1] == inputs[1:], "targets must be the inputs shifted by one"
    trained = [0, *(int(bool(m)) for m in trained)]
    return _view(rollout_key, inputs + targets[-1:], trained.index(1), trained, [0.0, *logprobs], [0.0, *advantages])


# -- each adapter's native batch, mapped back ----------------------------------------------------------


def _session_of(rollout_key: str) -> str:
    """`training.build_groups` keys a rollout as group_id/sample_index."""
    group_id, _, index = rollout_key.rpartition("/")
    return next(r.session_id for r in ROLLOUTS if r.group_id == group_id and r.sample_index == int(index))


def local_views(monkeypatch, model_dir) -> list[TraceView]:
    from agentcore_rl_harness.models import load_model
    from agentcore_rl_harness.trainers.local import LocalTrainer, LocalTrainerConfig

    trainer = LocalTrainer(load_model(model_dir), config=LocalTrainerConfig(device="cpu", micro_batch_tokens=64))
    batches = []
    tensors_of = trainer._tensors

    def record(items):
        batches.append((items, tensors_of(items)))
        return batches[-1][1]

    monkeypatch.setattr(trainer, "_tensors", record)
    groups, _ = build_groups(ROLLOUTS)
    trainer.step_sync(groups)
    views = []
    for items, tensors in batches:
        rows, columns = tensors["rows"].tolist(), tensors["columns"].tolist()
        positions, targets = tensors["positions"].tolist(), tensors["targets"].tolist()
        mask, old, advantages = tensors["mask"], tensors["old_logprobs"], tensors["advantages"].tolist()
        assert sorted(zip(rows, columns)) == sorted(map(tuple, mask.nonzero().tolist())), "rows/columns are the mask"
        for row, item in enumerate(items):
            token_ids = tensors["input_ids"][row][tensors["attention_mask"][row].bool()].tolist()
            picked = [(c, p, t) for r, c, p, t in zip(rows, columns, positions, targets) if r == row]
            # the logits at position p predict token p + 1 = prompt_length + column
            splits = {p + 1 - c for c, p, _ in picked}
            assert len(splits) == 1 and all(token_ids[p + 1] == t for _, p, t in picked)
            prompt_length = splits.pop()
            trained = [0] * len(token_ids)
            logprobs = [0.0] * len(token_ids)
            for column, _, _ in picked:
                trained[prompt_length + column] = 1
                logprobs[prompt_length + column] = float(old[row, column])
            assert not old[row][mask[row] == 0].any(), "old logprobs are 0 off the mask"
            views.append(_view(_session_of(item.rollout_key), token_ids, prompt_length, trained, logprobs,
                               [advantages[row] * m for m in trained]))
    return views


class Done:
    def __init__(self, value):
        self.value = value

    def result(self, timeout=None):
        return self.value


class RecordingClient:
    """A training client (tinker's and SageMaker's shared surface) keeping what a step sent."""

    training_session_name = "conformance"

    def __init__(self, *, forward_result, optim_result):
        self.forward_result, self.optim_result = forward_result, optim_result
        self.sent = []

    def forward_backward(self, data, *args, **kwargs):
        self.sent.extend(data)
        return Done(self.forward_result)

    def optim_step(self, params):
        return Done(self.optim_result)

    def save_weights_and_get_sampling_client(self, **kwargs):
        return Done(SimpleNamespace())

    def create_sampling_client(self):
        return SimpleNamespace()

    def stop(self):
        pass


def record_token_data(monkeypatch, module) -> list:
    """The `TokenDatum`s `module` builds, in order: they name the rollout of each native datum."""
    made, convert = [], module.token_data

    def recording(items):
        made.extend(convert(items))
        return list(made)

    monkeypatch.setattr(module, "token_data", recording)
    return made


def tinker_views(monkeypatch, model_dir) -> list[TraceView]:
    import tinker

    from agentcore_rl_harness.trainers import tinker as adapter
    from agentcore_rl_harness.trainers.grpo import GRPOConfig

    client = RecordingClient(
        forward_result=tinker.ForwardBackwardOutput(loss_fn_output_type="ArrayRecord", loss_fn_outputs=[], metrics={}),
        optim_result=tinker.OptimStepResponse(metrics=None))
    service = SimpleNamespace(create_lora_training_client=lambda **kwargs: Done(client))
    token_data = record_token_data(monkeypatch, adapter)
    trainer = adapter.TinkerTrainer(config=adapter.TinkerTrainerConfig(), algo=GRPOConfig(), base_model="tiny",
                                    service_client=service)
    groups, _ = build_groups(ROLLOUTS)
    asyncio.run(trainer.step(groups=groups))
    sent = client.sent
    assert len(sent) == len(token_data) and all(isinstance(d, tinker.Datum) for d in sent)
    logprobs = [d.loss_fn_inputs["logprobs"].tolist() for d in sent]
    total_tokens = sum(1 for values in logprobs for lp in values if lp)  # token_mean: A / total_tokens
    return [
        _from_shifted(_session_of(meta.rollout_key), d.model_input.to_ints(),
                      d.loss_fn_inputs["target_tokens"].tolist(), [lp != 0 for lp in lps], lps,
                      [a * total_tokens for a in d.loss_fn_inputs["advantages"].tolist()])
        for meta, d, lps in zip(token_data, sent, logprobs)
    ]


def sagemaker_views(monkeypatch, model_dir) -> list[TraceView]:
    from sagemaker.train.training_session import Datum

    from agentcore_rl_harness.trainers import sagemaker as adapter
    from agentcore_rl_harness.trainers.grpo import GRPOConfig

    result = SimpleNamespace(metrics={}, loss_fn_outputs=None)
    client = RecordingClient(forward_result=result, optim_result=result)
    token_data = record_token_data(monkeypatch, adapter)
    config = adapter.SageMakerTrainerConfig(
        region="us-west-2", role_arn="arn:aws:iam::1:role/r", s3_output_path="s3://bucket/out", base_model="m",
        model_package_group="arn:aws:sagemaker:us-west-2:1:model-package-group/g")
    trainer = adapter.SageMakerTrainer(client, config=config, algo=GRPOConfig())
    try:
        groups, _ = build_groups(ROLLOUTS)
        trainer.step_sync(groups)
    finally:
        trainer.close()
    sent = client.sent
    assert len(sent) == len(token_data) and all(isinstance(d, Datum) for d in sent)
    inputs = [d.loss_fn_inputs for d in sent]
    return [
        _from_shifted(_session_of(meta.rollout_key), d.model_input.to_ints(), i["target_tokens"].data,
                      i["weights"].data, i["logprobs"].data, i["advantages"].data)
        for meta, d, i in zip(token_data, sent, inputs)
    ]


class ScriptedRunner:
    """Stands in for the external adapters' RolloutRunner: the rollout a case names, already scored."""

    def __init__(self, trainer_config):
        self.config = SimpleNamespace(trainer=SimpleNamespace(trainer=trainer_config))
        self.tokenizer = None
        self._index = 0

    def next_sample_index(self):
        self._index += 1
        return self._index

    def submit(self, case):
        future = concurrent.futures.Future()
        future.set_result(BY_SESSION[case.row["session"]])
        return future

    async def run(self, case):
        return BY_SESSION[case.row["session"]]


def _row(r: Rollout) -> str:
    return json.dumps({"id": r.row_id, "session": r.session_id})


def verl_views(monkeypatch, model_dir) -> list[TraceView]:
    import numpy as np
    import torch
    from verl.experimental.agent_loop.agent_loop import AgentLoopOutput
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

    from agentcore_rl_harness.integrations import verl as adapter

    monkeypatch.setattr(adapter, "load_task", lambda ref: SimpleNamespace(name="calc"))
    rollout_config = SimpleNamespace(prompt_length=64, response_length=64)
    loop = adapter.AgentCoreRLAgentLoop(trainer_config=SimpleNamespace(config=SimpleNamespace(
        actor_rollout_ref=SimpleNamespace(rollout=rollout_config, model=SimpleNamespace(path="tiny")))),
        server_manager=None, tokenizer=None)
    runner = ScriptedRunner(adapter.VerlTrainerConfig())  # failure_policy=raise, trace_choice=most_trained
    loop._runner = lambda sampling_params: runner
    outputs, groups = [], []
    for r in ROLLOUTS:
        run = loop.run({"temperature": 1.0}, extra_info={"task_ref": "calc.py::test_calc", "row": _row(r)})
        if r.session_id == FAILED:
            with pytest.raises(HarnessError, match="timeout"):
                asyncio.run(run)
            continue
        outputs.append(asyncio.run(run))
        groups.append(r.group_id)
    assert all(isinstance(o, AgentLoopOutput) for o in outputs)
    # verl's reward manager puts the score on the last response token; GRPO groups by prompt uid.
    width = max(len(o.response_ids) for o in outputs)
    scores, masks = torch.zeros(len(outputs), width), torch.zeros(len(outputs), width)
    for row, o in enumerate(outputs):
        scores[row, len(o.response_ids) - 1] = o.reward_score
        masks[row, : len(o.response_mask)] = torch.tensor(o.response_mask, dtype=torch.float32)
    advantages, _ = compute_grpo_outcome_advantage(scores, masks, np.array(groups, dtype=object))
    views = []
    for row, o in enumerate(outputs):
        trained = [0] * len(o.prompt_ids) + list(o.response_mask)
        views.append(_view(o.extra_fields[adapter.AGENT_NAME]["session_id"], o.prompt_ids + o.response_ids,
                           len(o.prompt_ids), trained, [0.0] * len(o.prompt_ids) + list(o.response_logprobs),
                           [0.0] * len(o.prompt_ids) + advantages[row, : len(o.response_ids)].tolist()))
    forked = next(o for o in outputs if o.extra_fields[adapter.AGENT_NAME]["session_id"] == FORKED)
    assert forked.extra_fields[adapter.AGENT_NAME]["traces_unused"] == 1
    return views


def slime_views(monkeypatch, model_dir) -> list[TraceView]:
    from agentcore_rl_harness.integrations import slime as adapter

    monkeypatch.setattr(adapter, "load_task", lambda ref: SimpleNamespace(name="calc"))
    group_ids = list(dict.fromkeys(r.group_id for r in ROLLOUTS))
    # one prompt sample per rollout, as `agentcore-rl export slime` lays out a row's metadata
    prompts = [
        [adapter.StandInSample(group_index=g, index=i, metadata={adapter.META_KEY: {"task_ref": "calc.py::t",
                                                                                   "row": _row(r)}})
         for i, r in enumerate(r for r in ROLLOUTS if r.group_id == group_id)]
        for g, group_id in enumerate(group_ids)
    ]
    groups, metrics = adapter.play_groups(ScriptedRunner(adapter.SlimeTrainerConfig()), prompts, rollout_id=0,
                                          decode=lambda tokens: "")
    assert metrics[f"{adapter.META_KEY}/dropped_rollouts"] == 1.0  # failure_policy=drop
    samples = [sample for group in groups for sample in group]
    args = SimpleNamespace(advantage_estimator="grpo", rewards_normalization=True, grpo_std_normalization=True)
    raw, normalised = adapter.post_process_rewards(args, samples)
    assert raw == [BY_SESSION[s.metadata[adapter.META_KEY]["rollout_id"]].reward for s in samples]
    views = []
    for sample, advantage in zip(samples, normalised):
        prompt_length = len(sample.tokens) - sample.response_length
        trained = [0] * prompt_length + list(sample.loss_mask)
        views.append(_view(sample.metadata[adapter.META_KEY]["rollout_id"], sample.tokens, prompt_length, trained,
                           [0.0] * prompt_length + list(sample.rollout_log_probs), [advantage * m for m in trained]))
    return views


# -- what each adapter should produce -----------------------------------------------------------------


@dataclass(frozen=True)
class Conformance:
    views: Callable[[pytest.MonkeyPatch, object], list[TraceView]]
    """(monkeypatch, tiny model dir) -> the adapter's batch as views."""
    skips_constant_groups: bool
    """False: the framework keeps a constant-reward group, with advantage 0."""
    one_trace_per_rollout: bool
    """True: a forked rollout trains its `most_trained` trace only."""
    unbiased_std: bool
    """True: advantages divide by the sample std, else the population std."""


ADAPTERS = {
    "local": Conformance(local_views, True, False, False),
    "tinker": Conformance(tinker_views, True, False, False),
    "sagemaker": Conformance(sagemaker_views, True, False, False),
    "verl": Conformance(verl_views, False, True, True),
    "slime": Conformance(slime_views, False, False, False),
}


def expected_advantages(spec: Conformance) -> dict[str, float]:
    """Each scored rollout's advantage, computed here from the rewards, each rollout once."""
    advantages = {}
    for group_id in dict.fromkeys(r.group_id for r in ROLLOUTS):
        scored = [r for r in ROLLOUTS if r.group_id == group_id and r.status is Status.COMPLETED]
        rewards = [r.reward for r in scored]
        mean = sum(rewards) / len(rewards)
        if max(rewards) == min(rewards):
            if not spec.skips_constant_groups:
                advantages.update({r.session_id: 0.0 for r in scored})
            continue
        dof = len(rewards) - 1 if spec.unbiased_std else len(rewards)
        std = math.sqrt(sum((x - mean) ** 2 for x in rewards) / dof)
        advantages.update({r.session_id: (r.reward - mean) / std for r in scored})
    return advantages


def expected_traces(spec: Conformance) -> dict[tuple[str, tuple[int, ...]], Trace]:
    """(rollout, token ids) -> trace, for every trace that should reach this adapter's loss."""
    advantages = expected_advantages(spec)
    out = {}
    for r in ROLLOUTS:
        if r.session_id not in advantages:
            continue
        traces = [t for t in r.traces if any(t.loss_mask)]
        if spec.one_trace_per_rollout:
            traces = [max(reversed(traces), key=lambda t: sum(t.loss_mask))]
        out.update({(r.session_id, t.token_ids): t for t in traces})
    return out


@pytest.fixture(params=list(ADAPTERS), scope="module")
def adapter(request, tiny_model_dir):
    """(name, spec, views keyed by (rollout, token ids)); built once per adapter."""
    name = request.param
    if name == "tinker":
        pytest.importorskip("tinker")
    if name == "sagemaker":
        pytest.importorskip("sagemaker.train.training_session")
    if name == "verl":
        pytest.importorskip("verl.experimental.agent_loop.agent_loop")
    spec = ADAPTERS[name]
    with pytest.MonkeyPatch.context() as monkeypatch:
        views = spec.views(monkeypatch, tiny_model_dir)
    keyed = {(v.rollout, v.token_ids): v for v in views}
    assert len(keyed) == len(views), f"{name}: a trace appears twice in the batch"
    return name, spec, keyed


def test_the_batch_holds_exactly_the_traces_that_train(adapter):
    name, spec, views = adapter
    assert set(views) == set(expected_traces(spec))
    assert FAILED not in {rollout for rollout, _ in views}


def test_prompt_response_split_matches_the_trace(adapter):
    name, spec, views = adapter
    for key, trace in expected_traces(spec).items():
        assert views[key].prompt_length == trace.prompt_length, key


def test_mask_is_one_exactly_on_sampled_tokens(adapter):
    name, spec, views = adapter
    for key, trace in expected_traces(spec).items():
        assert views[key].trained == (0,) * trace.prompt_length + tuple(trace.loss_mask), key


def test_every_trained_token_carries_its_rollouts_advantage(adapter):
    name, spec, views = adapter
    advantages = expected_advantages(spec)
    for (rollout, _), view in views.items():
        want = [advantages[rollout] if m else 0.0 for m in view.trained]
        assert view.advantages == pytest.approx(want, rel=1e-5, abs=1e-6), (rollout, view.token_ids)
    constant = [v for (rollout, _), v in views.items() if rollout in CONSTANT_GROUP]
    assert all(not any(v.advantages) for v in constant)
    assert bool(constant) != spec.skips_constant_groups


def test_a_forked_rollout_counts_once_and_its_traces_share_its_advantage(adapter):
    name, spec, views = adapter
    forked = [v for (rollout, _), v in views.items() if rollout == FORKED]
    assert len(forked) == (1 if spec.one_trace_per_rollout else 2)
    per_trace = {a for v in forked for a, m in zip(v.advantages, v.trained) if m}
    assert len(per_trace) == 1
    # r0's rewards are 1.0 / 0.0 / 0.5 with a1 counted once: mean 0.5, so a1's advantage is -0.5 / std.
    std = math.sqrt((0.25 + 0.25 + 0.0) / (2 if spec.unbiased_std else 3))
    assert per_trace.pop() == pytest.approx(-0.5 / std, rel=1e-5)


def test_the_samplers_logprobs_are_carried_through_unchanged(adapter):
    name, spec, views = adapter
    for key, trace in expected_traces(spec).items():
        sampled = tuple(lp if m else None for lp, m in zip(trace.logprobs, trace.loss_mask))
        want = (None,) * trace.prompt_length + sampled
        got = views[key].logprobs
        assert [lp is None for lp in got] == [lp is None for lp in want], key
        assert [lp for lp in got if lp is not None] == pytest.approx([lp for lp in want if lp is not None], rel=1e-6)
