"""`trainer=verl`: an agent loop for stock `python -m verl.trainer.main_ppo` (verl 0.9).

verl drives training; for every sample of a batch its agent-loop worker instantiates the class
named in the agent-loop YAML (`verl_agent_loop.yaml`, shipped beside this module) and awaits
`run(sampling_params, **row_fields)`. `AgentCoreRLAgentLoop.run` plays one harness episode for
that sample: a gateway session and an agent session for the row's task (the exported dataset's
`extra_info` names the task file and carries the row), sampling through verl's own inference
servers (`server_manager.generate(request_id, prompt_ids=..., sampling_params=...)`, wrapped as
a `SamplingBackend` by `VerlServerSampler`), then scores the rollout with the task and returns
one `AgentLoopOutput`.

One output per sample: verl 0.9 stacks exactly one output per sample and forms GRPO groups over
them, so a rollout that forked into several traces trains ONE of them (`trace_choice`:
`most_trained` (default; most trained tokens, ties to the later trace), `last` or `first`); the
others are counted in `extra_fields["agentcore_rl"]` (`traces_unused`, `unused_trained_tokens`).

Failures: verl cannot drop a sample from a group, and a made-up reward would bias the group's
advantages, so a rollout that ended timeout / agent_error / infra_error (or left no trace with a
trained token) is either retried in a fresh session (`failure_policy: retry`, up to
`max_attempts`) or raises (`raise`, the default), which stops verl's step with the reason.
"""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError, HarnessError, MissingDependencyError, SamplingError
from ..gateway.sampling import SamplingBackend, TokenCallback
from ..records import FinishReason, Rollout, SampleResult, SamplingParams, Trace
from ..run.training import training_reward
from ..trainers.base import TrainerNode
from ._episodes import (
    CONFIG_ENV, OVERRIDES_ENV, RolloutRunner, case_for, harness_config, is_failed,
    close_runners, overrides_from_env, shared_runner, trained_tokens,
)
from ._tasks import load_task

AGENT_NAME = "agentcore_rl"
FAILURE_POLICIES = ("raise", "retry")
TRACE_CHOICES = ("most_trained", "last", "first")
AGENT_LOOP_YAML = os.path.join(os.path.dirname(__file__), "verl_agent_loop.yaml")

EXTERNAL_COMMAND = f"""trainer=verl is an external trainer: verl's own trainer runs the loop and \
calls the harness once per sample, so `--agentcore-rl train` / `run` cannot drive it. Run instead:
  agentcore-rl export verl --task <TASK> --out data/verl
  python -m verl.trainer.main_ppo algorithm.adv_estimator=grpo \\
    data.train_files=data/verl/train.parquet data.val_files=data/verl/test.parquet \\
    data.return_raw_chat=True data.filter_overlong_prompts=False \\
    actor_rollout_ref.rollout.mode=async actor_rollout_ref.rollout.calculate_log_probs=True \\
    actor_rollout_ref.rollout.agent.default_agent_loop={AGENT_NAME} \\
    actor_rollout_ref.rollout.agent.agent_loop_config_path=data/verl/agent_loop.yaml \\
    actor_rollout_ref.model.path=<HF model> actor_rollout_ref.rollout.n=<group size> ...
(`agentcore-rl export verl` prints the full command; packaged agent-loop YAML: {AGENT_LOOP_YAML}).
`pytest --agentcore-rl eval` works with any trainer for pre/post evaluation."""


@dataclass(frozen=True)
class VerlTrainerConfig(TrainerNode):
    """The `trainer` node for `trainer=verl` (read by the agent loop inside verl's workers)."""

    kind: str = "verl"
    failure_policy: str = "raise"
    """`raise`: a failed rollout stops verl's step; `retry`: rerun it in a fresh session."""
    max_attempts: int = 3
    """Sessions tried per sample under `retry` (then it raises)."""
    trace_choice: str = "most_trained"
    """Which trace of a forked rollout becomes the sample's output: one of TRACE_CHOICES."""
    rollouts_dir: str | None = None
    """If set, every scored rollout is appended to `<dir>/rollouts.jsonl` (the run-dir record)."""

    def __post_init__(self) -> None:
        if self.failure_policy not in FAILURE_POLICIES:
            raise ConfigError(
                f"trainer.failure_policy={self.failure_policy!r} is not supported with trainer=verl; "
                f"valid choices: {list(FAILURE_POLICIES)} (verl 0.9 cannot drop a sample)"
            )
        if self.trace_choice not in TRACE_CHOICES:
            raise ConfigError(
                f"trainer.trace_choice={self.trace_choice!r}; valid choices: {list(TRACE_CHOICES)}"
            )
        if self.max_attempts < 1:
            raise ConfigError(f"trainer.max_attempts={self.max_attempts} must be >= 1")


# -- the SamplingBackend over verl's server manager ----------------------------------------------


class VerlServerSampler(SamplingBackend):
    """A `SamplingBackend` over verl's `LLMServerClient.generate` (token ids in, TokenOutput out).

    The gateway samples on its own event loop; verl's client belongs to the agent-loop worker's
    loop, so each call is run there (`loop`) and awaited from the gateway's.
    """

    def __init__(self, server_manager: Any, *, loop: asyncio.AbstractEventLoop,
                 repetition_penalty: float = 1.0) -> None:
        self.server_manager = server_manager
        self.loop = loop
        self.repetition_penalty = repetition_penalty

    def request(self, params: SamplingParams) -> dict[str, Any]:
        """verl's `sampling_params` dict for one turn (vLLM / SGLang names; top_k -1 means off)."""
        sampling: dict[str, Any] = {
            "temperature": params.temperature,
            "top_p": params.top_p,
            "top_k": params.top_k if params.top_k > 0 else -1,
            "repetition_penalty": self.repetition_penalty,
            "logprobs": True,
            "max_tokens": params.max_tokens,
        }
        if params.stop_token_ids:
            sampling["stop_token_ids"] = list(params.stop_token_ids)
        return sampling

    async def sample(self, *, prompt_token_ids: Sequence[int], params: SamplingParams,
                     on_token: TokenCallback | None = None) -> SampleResult:
        from ..gateway.sampling import current_routing_key
        from ..samplers._http import checked_result

        # The gateway session id keeps a session on one server (verl routes by request_id).
        request_id = current_routing_key() or uuid.uuid4().hex
        call = self.server_manager.generate(
            request_id, prompt_ids=[int(t) for t in prompt_token_ids],
            sampling_params=self.request(params),
        )
        try:
            if _running_loop() is self.loop:
                output = await call
            else:
                output = await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(call, self.loop))
        except (asyncio.CancelledError, SamplingError):
            raise
        except Exception as exc:  # ray / engine errors: translate at the seam
            raise SamplingError(f"verl server_manager.generate failed: {type(exc).__name__}: {exc}") from exc
        token_ids = list(output.token_ids)
        if output.stop_reason == "aborted":
            raise SamplingError(f"verl aborted request {request_id} (weights update or shutdown)")
        if output.log_probs is None:
            raise SamplingError(
                "verl returned no logprobs; set actor_rollout_ref.rollout.calculate_log_probs=True"
            )
        hit_limit = len(token_ids) >= params.max_tokens and not (
            token_ids and token_ids[-1] in params.stop_token_ids
        )
        versions = (getattr(output, "extra_fields", None) or {}).get("global_steps")
        return checked_result(
            token_ids, list(output.log_probs),
            FinishReason.LENGTH if hit_limit else FinishReason.STOP, engine="verl",
            policy_version=int(versions) if isinstance(versions, int) else 0, on_token=on_token,
        )

    def close(self) -> None:
        """verl owns its servers; nothing to release."""


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


# -- rollout -> AgentLoopOutput ---------------------------------------------------------------------


def choose_trace(traces: Sequence[Trace], choice: str) -> tuple[int, Trace]:
    """(index, trace) of the trace a forked rollout trains under verl (see module docstring)."""
    usable = [(index, trace) for index, trace in enumerate(traces) if trained_tokens(trace)]
    if not usable:
        raise HarnessError("the rollout has no trace with a trained token")
    if choice == "first":
        return usable[0]
    if choice == "last":
        return usable[-1]
    return max(usable, key=lambda pair: (trained_tokens(pair[1]), pair[0]))


def _agent_loop_types() -> tuple[Any, Any]:
    try:
        from verl.experimental.agent_loop.agent_loop import AgentLoopMetrics, AgentLoopOutput
    except ImportError as exc:
        raise MissingDependencyError(
            "trainer=verl needs verl 0.9 in the verl worker processes: pip install verl==0.9.1 "
            "(with its inference engine, e.g. verl[vllm])"
        ) from exc
    return AgentLoopOutput, AgentLoopMetrics


def agent_loop_output(
    rollout: Rollout, *, trace_choice: str, prompt_length: int, response_length: int
) -> Any:
    """The verl `AgentLoopOutput` of one scored rollout (one trace; reward at its last token).

    `response_mask` is the trace's loss mask (1 on sampled tokens, 0 on tool results and template
    glue) and `response_logprobs` the sampler's logprobs (0.0 where the mask is 0, unused). A
    prompt longer than verl's `rollout.prompt_length` raises (cutting it would train tokens on a
    context the model never saw); a response longer than `rollout.response_length` is cut at the
    end, as verl's own agent loops do, and the cut is counted.
    """
    reason = _unusable(rollout)
    if reason is not None:  # never a made-up reward for a session that failed
        raise HarnessError(f"task {rollout.task} row {rollout.row_id} cannot be a verl sample: {reason}")
    AgentLoopOutput, AgentLoopMetrics = _agent_loop_types()
    index, trace = choose_trace(rollout.traces, trace_choice)
    prompt_ids = list(trace.token_ids[: trace.prompt_length])
    if len(prompt_ids) > prompt_length:
        raise ConfigError(
            f"task {rollout.task} row {rollout.row_id}: the trace's prompt has {len(prompt_ids)} "
            f"tokens but verl's actor_rollout_ref.rollout.prompt_length is {prompt_length}; raise it"
        )
    response_ids = list(trace.token_ids[trace.prompt_length:])
    mask = [int(bool(m)) for m in trace.loss_mask]
    logprobs = [float(lp) if m else 0.0 for m, lp in zip(mask, trace.logprobs)]
    cut = max(0, len(response_ids) - response_length)
    if cut:
        response_ids, mask, logprobs = (
            response_ids[:response_length], mask[:response_length], logprobs[:response_length]
        )
    unused = [t for i, t in enumerate(rollout.traces) if i != index]
    info = {
        "task": rollout.task, "row_id": rollout.row_id, "session_id": rollout.session_id,
        "status": rollout.status.value, "success": rollout.success, "rewards": dict(rollout.rewards),
        "trace_index": index, "traces_total": len(rollout.traces), "traces_unused": len(unused),
        "unused_trained_tokens": sum(trained_tokens(t) for t in unused),
        "truncated_response_tokens": cut, "finish_reason": trace.finish_reason,
    }
    return AgentLoopOutput(
        prompt_ids=prompt_ids,
        response_ids=response_ids,
        response_mask=mask,
        response_logprobs=logprobs,
        reward_score=training_reward(rollout),
        num_turns=rollout.turns,
        metrics=AgentLoopMetrics(generate_sequences=rollout.elapsed_s),
        extra_fields={"turn_scores": [], "tool_rewards": [], AGENT_NAME: info},
    )


# -- the agent loop -------------------------------------------------------------------------------

"""One RolloutRunner per (config, sampling, server manager) per worker process: verl builds a new
agent-loop object for every sample, while the gateway and runtime must outlive them."""


class AgentCoreRLAgentLoop:
    """verl agent loop: one harness episode per sample (registered by `verl_agent_loop.yaml`).

    Duck-typed rather than a subclass of verl's `AgentLoopBase`: the worker only instantiates it
    and awaits `run`, and the harness's gateway owns tokenization, so verl's token builder is not
    needed (and this module imports without verl).
    """

    def __init__(self, *, trainer_config: Any, server_manager: Any, tokenizer: Any,
                 config: str | None = None, overrides: Sequence[str] = (), **_verl_kwargs: Any) -> None:
        verl_config = trainer_config.config
        rollout = verl_config.actor_rollout_ref.rollout
        self.prompt_length = int(rollout.prompt_length)
        self.response_length = int(rollout.response_length)
        self.model_id = str(verl_config.actor_rollout_ref.model.path)
        self.server_manager = server_manager
        self.tokenizer = tokenizer
        self.config_source = config or os.environ.get(CONFIG_ENV) or None
        self.overrides = [*overrides, *overrides_from_env(os.environ.get(OVERRIDES_ENV))]

    def _runner(self, sampling_params: dict[str, Any]) -> RolloutRunner:
        sampling = (
            float(sampling_params.get("temperature", 1.0)),
            float(sampling_params.get("top_p", 1.0)),
            int(sampling_params.get("top_k", -1) or -1),
            float(sampling_params.get("repetition_penalty", 1.0)),
        )
        key = (self.config_source, tuple(self.overrides), sampling, id(self.server_manager))

        def build() -> RolloutRunner:
            temperature, top_p, top_k, repetition_penalty = sampling
            config = harness_config(
                source=self.config_source, overrides=self.overrides, trainer="verl",
                temperature=temperature, top_p=top_p, top_k=top_k, max_tokens_cap=self.response_length,
            )
            sampler = VerlServerSampler(self.server_manager, loop=asyncio.get_running_loop(),
                                        repetition_penalty=repetition_penalty)
            return RolloutRunner(
                config, sampler=sampler, tokenizer=self.tokenizer, model_id=self.model_id,
                run_id=f"verl-{os.getpid()}", rollouts_dir=config.trainer.trainer.rollouts_dir,
            )

        return shared_runner(key, build)

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> Any:
        extra_info = kwargs.get("extra_info") or {}
        if "task_ref" not in extra_info or "row" not in extra_info:
            raise ConfigError(
                "this verl sample has no extra_info.task_ref / extra_info.row; build the dataset "
                "with `agentcore-rl export verl --task NAME --out DIR`"
            )
        spec = load_task(str(extra_info["task_ref"]))
        row = json.loads(extra_info["row"])
        runner = self._runner(sampling_params)
        settings: VerlTrainerConfig = runner.config.trainer.trainer
        attempts = settings.max_attempts if settings.failure_policy == "retry" else 1
        failures: list[str] = []
        for _ in range(attempts):
            case = case_for(spec, row, sample_index=runner.next_sample_index(), phase="train")
            rollout = await runner.run(case)
            problem = _unusable(rollout)
            if problem is None:
                output = agent_loop_output(
                    rollout, trace_choice=settings.trace_choice, prompt_length=self.prompt_length,
                    response_length=self.response_length,
                )
                output.extra_fields[AGENT_NAME]["failed_attempts"] = len(failures)
                return output
            failures.append(problem)
        raise HarnessError(
            f"task {spec.name} row {row.get('id')}: {len(failures)} session(s) failed "
            f"(trainer.failure_policy={settings.failure_policy}, max_attempts={settings.max_attempts}): "
            + "; ".join(failures)
        )


def _unusable(rollout: Rollout) -> str | None:
    """Why a rollout cannot become a verl sample, or None."""
    if is_failed(rollout):
        return f"{rollout.status.value}: {rollout.error}"
    if not any(trained_tokens(trace) for trace in rollout.traces):
        return f"{rollout.status.value} without any sampled token (the agent never called the model)"
    return None


__all__ = [
    "AGENT_NAME", "AgentCoreRLAgentLoop", "EXTERNAL_COMMAND", "VerlServerSampler", "close_runners",
    "VerlTrainerConfig", "agent_loop_output", "choose_trace",
]
