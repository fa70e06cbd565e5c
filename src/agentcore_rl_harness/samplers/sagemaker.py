"""`SageMakerSampler`: sampling through a SageMaker Training Sessions `SamplingClient`.

SDK: `sagemaker-train` 1.27 (`sagemaker.train.training_session`). The prompt goes in as
`ModelInput.from_ints(ids)`; one `SampledSequence` comes back with `tokens`, `logprobs` and
`stop_reason`. Two service rules shape the request:

- `maxTokens` must be >= 512 (botocore refuses less before sending). A smaller `max_tokens` is
  sent as 512 and the sequence cut to `max_tokens` here: the first N tokens of a longer sample
  are distributed exactly as a sample of N tokens, so nothing is biased, only decode is wasted.
- `stop` takes text only. Stop token ids are applied here instead: the sequence is cut after the
  first one (it stays in, as the model produced it), with finish reason `stop`.

The trainer swaps in a new `SamplingClient` after every update (`publish_weights`); the session itself is
the trainer's to stop, so `close` does nothing to it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..errors import MissingDependencyError, SamplingError
from ..gateway.sampling import SamplingBackend, TokenCallback
from ..records import FinishReason, SampleResult, SamplingParams
from ._http import checked_result, finish_reason

ENGINE = "SageMaker Training Sessions"
SAGEMAKER_REQUIREMENT = "sagemaker-train==1.27.0"
MIN_SERVICE_MAX_TOKENS = 512


def import_training_session() -> Any:
    """The SDK module, or a `MissingDependencyError` saying what to install."""
    try:
        from sagemaker.train import training_session
    except ImportError as exc:
        raise MissingDependencyError(
            f"trainer=sagemaker needs the SageMaker training-session SDK ({exc}); pip install "
            f"'agentcore-rl-harness[sagemaker]' (or '{SAGEMAKER_REQUIREMENT}')"
        ) from exc
    return training_session


def service_errors() -> tuple[type[BaseException], ...]:
    """Exceptions of the SDK and botocore that mean the service call failed."""
    from botocore.exceptions import BotoCoreError, ClientError

    sdk = import_training_session()
    return (sdk.TrainingSessionError, ClientError, BotoCoreError, TimeoutError)


class SageMakerSampler(SamplingBackend):
    """A `SamplingBackend` over a `sagemaker.train.training_session.SamplingClient`."""

    def __init__(self, sampling_client: Any, *, policy_version: int = 0) -> None:
        self._sdk = import_training_session()
        self._errors = service_errors()
        self.sampling_client = sampling_client
        self.policy_version = policy_version

    def publish_weights(self, sampling_client: Any, *, policy_version: int) -> None:
        """`WeightSync`: sample from `sampling_client` (new weights) from now on; in-flight samples
        finish on the old one."""
        self.sampling_client = sampling_client
        self.policy_version = policy_version

    def request(self, prompt_token_ids: Sequence[int], params: SamplingParams) -> dict[str, Any]:
        """The keyword arguments of `SamplingClient.sample`, as the SDK's own types."""
        sdk = self._sdk
        return {
            "prompt": sdk.ModelInput.from_ints([int(t) for t in prompt_token_ids]),
            "num_samples": 1,
            "sampling_params": sdk.SamplingParams(
                max_tokens=max(params.max_tokens, MIN_SERVICE_MAX_TOKENS),
                temperature=params.temperature,
                top_p=params.top_p,
                top_k=params.top_k if params.top_k > 0 else None,
                seed=params.seed,
            ),
        }

    async def sample(self, *, prompt_token_ids: Sequence[int], params: SamplingParams,
                     on_token: TokenCallback | None = None) -> SampleResult:
        client, version = self.sampling_client, self.policy_version
        try:
            response = await client.sample_async(**self.request(prompt_token_ids, params))
        except self._errors as exc:
            raise SamplingError(f"{ENGINE} sampling failed: {type(exc).__name__}: {exc}") from exc
        if not response.sequences:
            raise SamplingError(f"{ENGINE} returned no sequences: {response!r}")
        sequence = response.sequences[0]
        tokens, logprobs = list(sequence.tokens), sequence.logprobs
        finish = finish_reason(getattr(sequence.stop_reason, "value", sequence.stop_reason), engine=ENGINE)
        if logprobs is not None and len(logprobs) == len(tokens):
            tokens, logprobs, finish = _cut(tokens, list(logprobs), finish, params)
        return checked_result(tokens, logprobs, finish, engine=ENGINE, policy_version=version,
                              on_token=on_token)

    def close(self) -> None:
        """Nothing to release here: the trainer owns (and stops) the session."""


def _cut(tokens: list[int], logprobs: list[float], finish: FinishReason,
         params: SamplingParams) -> tuple[list[int], list[float], FinishReason]:
    """Apply stop token ids and the caller's `max_tokens`, which the service cannot (see module doc)."""
    stops = set(params.stop_token_ids)
    for position, token in enumerate(tokens[: params.max_tokens]):
        if token in stops:
            return tokens[: position + 1], logprobs[: position + 1], FinishReason.STOP
    if len(tokens) > params.max_tokens:
        return tokens[: params.max_tokens], logprobs[: params.max_tokens], FinishReason.LENGTH
    return tokens, logprobs, finish
