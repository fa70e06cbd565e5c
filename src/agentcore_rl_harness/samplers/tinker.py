"""`TinkerSampler`: sampling through the official `tinker` SDK's `SamplingClient` (tinker 0.38).

The prompt goes in as `tinker.ModelInput.from_ints(ids)`; one sequence comes back with `tokens`,
`logprobs` and `stop_reason`. The SDK is imported when the sampler is built, so the package does
not need it otherwise; a missing SDK says what to install.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..errors import MissingDependencyError, SamplingError
from ..gateway.sampling import SamplingBackend, TokenCallback
from ..records import SampleResult, SamplingParams
from ._http import checked_result, finish_reason

ENGINE = "Tinker"
TINKER_REQUIREMENT = "tinker>=0.38,<0.39"


def import_tinker() -> Any:
    try:
        import tinker
    except ImportError as exc:
        raise MissingDependencyError(
            f"the tinker sampler needs the tinker SDK ({exc}); pip install '{TINKER_REQUIREMENT}'"
        ) from exc
    return tinker


def _at_least(version: str, minimum: str) -> bool:
    from packaging.version import InvalidVersion, Version

    try:
        return Version(version) >= Version(minimum)
    except InvalidVersion:
        return False


class TinkerSampler(SamplingBackend):
    """A `SamplingBackend` over a `tinker.SamplingClient` (from `ServiceClient` or a trainer)."""

    def __init__(self, sampling_client: Any, *, policy_version: int = 0) -> None:
        self._tinker = import_tinker()
        self.sampling_client = sampling_client
        self.policy_version = policy_version
        self._awaitable_sample = _at_least(getattr(self._tinker, "__version__", "0"), "0.38")

    def publish_weights(self, sampling_client: Any, *, policy_version: int) -> None:
        """`WeightSync`: sample from new weights from now on; samples in flight keep the client
        and version they started with."""
        self.sampling_client, self.policy_version = sampling_client, policy_version

    def close(self) -> None:
        """Nothing to release: the sampling client belongs to whoever made it (a trainer, the CLI)."""

    def request(self, prompt_token_ids: Sequence[int], params: SamplingParams) -> dict[str, Any]:
        """The keyword arguments of `SamplingClient.sample_async`, as real tinker objects."""
        tinker = self._tinker
        return {
            "prompt": tinker.ModelInput.from_ints([int(t) for t in prompt_token_ids]),
            "num_samples": 1,
            "sampling_params": tinker.SamplingParams(
                max_tokens=params.max_tokens, seed=params.seed, stop=list(params.stop_token_ids) or None,
                temperature=params.temperature, top_k=params.top_k if params.top_k > 0 else -1,
                top_p=params.top_p),
        }

    async def score(self, *, prompt_token_ids: Sequence[int], completion_token_ids: Sequence[int],
                    temperature: float = 1.0) -> tuple[float, ...]:
        """Logprobs of `completion_token_ids` after the prompt (`SamplingClient.compute_logprobs`,
        which scores at temperature 1 only)."""
        if temperature != 1.0:
            raise SamplingError(f"{ENGINE} scores at temperature 1 only, got temperature={temperature}")
        completion = [int(t) for t in completion_token_ids]
        if not completion or not prompt_token_ids:
            raise SamplingError(
                f"score needs a non-empty prompt and completion, got {len(prompt_token_ids)} and "
                f"{len(completion)} tokens"
            )
        prompt = self._tinker.ModelInput.from_ints([*(int(t) for t in prompt_token_ids), *completion])
        client = self.sampling_client
        try:
            if self._awaitable_sample:
                logprobs = await client.compute_logprobs(prompt, prompt_logprobs_last_n=len(completion))
            else:
                logprobs = await client.compute_logprobs_async(prompt)
        except self._tinker.TinkerError as exc:
            raise SamplingError(f"{ENGINE} scoring failed: {type(exc).__name__}: {exc}") from exc
        tail = list(logprobs)[-len(completion):]
        if len(tail) != len(completion) or any(value is None for value in tail):
            raise SamplingError(f"{ENGINE} returned no logprob for some of the {len(completion)} scored tokens")
        return tuple(float(value) for value in tail)

    async def sample(self, *, prompt_token_ids: Sequence[int], params: SamplingParams,
                     on_token: TokenCallback | None = None) -> SampleResult:
        client, version = self.sampling_client, self.policy_version
        request = self.request(prompt_token_ids, params)
        # tinker 0.38's sample() returns an awaitable future and deprecates sample_async; 0.24's and
        # 0.25's (SkyRL's SDKs) return a plain concurrent future, so they keep sample_async.
        sample = getattr(client, "sample", None) if self._awaitable_sample else None
        try:
            response = await (sample(**request) if sample is not None else client.sample_async(**request))
        except self._tinker.TinkerError as exc:
            raise SamplingError(f"{ENGINE} sampling failed: {type(exc).__name__}: {exc}") from exc
        sequences = getattr(response, "sequences", None)
        if not sequences:
            raise SamplingError(f"{ENGINE} returned no sequences: {response!r}")
        sequence = sequences[0]
        return checked_result(sequence.tokens, sequence.logprobs,
                              finish_reason(str(sequence.stop_reason), engine=ENGINE), engine=ENGINE,
                              policy_version=version, on_token=on_token)
