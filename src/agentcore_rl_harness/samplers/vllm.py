"""`VLLMSampler`: tokens in, tokens + logprobs out through vLLM's `POST /inference/v1/generate`.

Pinned to the request/response shape of vLLM 0.18 (`vllm/entrypoints/serve/disagg/protocol.py`,
https://docs.vllm.ai/en/v0.18.2/api/vllm/entrypoints/serve/disagg/serving/): the request is
`{token_ids, sampling_params, model?, stream: false, request_id}`; the answer's
`choices[0]` has `token_ids`, `finish_reason` and `logprobs.content[i].logprob`. Serve with
`vllm serve MODEL --enable-scale-out --tokens-only --logprobs-mode processed_logprobs` so the
logprobs are those of softmax(logits / T), the harness' contract. Each request carries the
session's routing key (`X-Session-Id` by default) for sticky routing behind a load balancer.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import httpx

from ..errors import SamplingError
from ..gateway.sampling import TokenCallback
from ..records import SampleResult, SamplingParams
from ._http import ROUTING_HEADER, checked_result, finish_reason, post_json, routing_headers

ENGINE = "vLLM"
# vLLM fills a missing logprob with this placeholder (ChatCompletionLogProbsContent's default).
_MISSING_LOGPROB = -9999.0


class VLLMSampler:
    """A `SamplingBackend` over a vLLM server's token-in/token-out endpoint."""

    def __init__(self, base_url: str, *, model: str | None = None, timeout_s: float = 600.0,
                 routing_header: str = ROUTING_HEADER, policy_version: int = 0,
                 client: httpx.AsyncClient | None = None) -> None:
        self.url = base_url.rstrip("/") + "/inference/v1/generate"
        self.model = model
        self.routing_header = routing_header
        self.policy_version = policy_version
        self._client = client or httpx.AsyncClient(timeout=timeout_s)

    def request_body(self, prompt_token_ids: Sequence[int], params: SamplingParams) -> dict[str, Any]:
        sampling: dict[str, Any] = {
            "n": 1, "temperature": params.temperature, "top_p": params.top_p,
            "top_k": params.top_k if params.top_k > 0 else -1, "max_tokens": params.max_tokens,
            "stop_token_ids": list(params.stop_token_ids), "logprobs": 0, "detokenize": False,
            "skip_special_tokens": False,
        }
        if params.seed is not None:
            sampling["seed"] = params.seed
        body: dict[str, Any] = {"request_id": uuid.uuid4().hex, "token_ids": [int(t) for t in prompt_token_ids],
                                "sampling_params": sampling, "stream": False}
        if self.model is not None:
            body["model"] = self.model
        return body

    async def sample(self, *, prompt_token_ids: Sequence[int], params: SamplingParams,
                     on_token: TokenCallback | None = None) -> SampleResult:
        body = self.request_body(prompt_token_ids, params)
        data = await post_json(self._client, self.url, body, engine=ENGINE,
                               headers=routing_headers(self.routing_header))
        try:
            choice = data["choices"][0]
            token_ids = choice["token_ids"]
            content = (choice.get("logprobs") or {}).get("content")
        except (KeyError, IndexError, TypeError, AttributeError) as exc:
            raise SamplingError(f"{ENGINE} answer has no choices[0].token_ids: {str(data)[:300]}") from exc
        if token_ids is None:
            raise SamplingError(f"{ENGINE} answer has token_ids null; the token-in endpoint must return ids")
        logprobs = None
        if content is not None:
            logprobs = [entry.get("logprob") if isinstance(entry, dict) else None for entry in content]
            if any(value is not None and value <= _MISSING_LOGPROB for value in logprobs):
                raise SamplingError(f"{ENGINE} returned its missing-logprob placeholder ({_MISSING_LOGPROB}); "
                                    "request logprobs (sampling_params.logprobs=0) from a server that supports them")
        return checked_result(token_ids, logprobs, finish_reason(choice.get("finish_reason"), engine=ENGINE),
                              engine=ENGINE, policy_version=self.policy_version, on_token=on_token)

    async def aclose(self) -> None:
        await self._client.aclose()
