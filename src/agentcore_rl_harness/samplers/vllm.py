"""`VLLMSampler`: tokens in, tokens + logprobs out through vLLM's `POST /inference/v1/generate`.

Request/response shapes of vLLM's tokens-in/tokens-out API (`vllm/entrypoints/serve/disagg/
protocol.py` and `serving.py`; docs https://docs.vllm.ai/en/v0.18.2/api/vllm/entrypoints/serve/
disagg/serving/): the request is `{token_ids, sampling_params, model?, stream, request_id}`; an
answer's `choices[0]` has `token_ids`, `finish_reason` and `logprobs.content[i].logprob`.

A turn whose caller does not take tokens as they come (no `on_token`: the gateway's non-streamed
requests) is one JSON request with `stream: false`. Streamed turns (`stream=None`, the default,
streams exactly the turns with `on_token`; True or False force it either way):
`ServingTokens.serve_tokens_stream_generator` (vLLM main, commit 0001948b) answers `text/event-stream` with one `data: <GenerateStreamResponse>` per engine
step, whose `choices[0]` carries only the new `token_ids` and their logprobs (DELTA output), the
last one its `finish_reason`, then `data: [DONE]`; errors arrive as `data: {"error": ...}`. Tokens
reach `on_token` as those events arrive. A server that ignores `stream` answers the JSON
response, which has the same `choices` shape and is read the same way.

Serve with `vllm serve MODEL --enable-scale-out --tokens-only --logprobs-mode processed_logprobs`
so the logprobs are those of softmax(logits / T), the harness' contract. Each request carries the
session's routing key (`X-Session-Id` by default, see `gateway.sampling.routing_key`) for sticky routing
behind a load balancer. Closing the stream (a cancelled sample) makes vLLM abort the request.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import SamplingError
from ..gateway.sampling import SamplingBackend, TokenCallback
from ..records import SampleResult, SamplingParams
from ._http import (MAX_CONNECTIONS, ROUTING_HEADER, HttpClient, TokenStream, finish_reason, routing_headers,
                    wants_stream)

ENGINE = "vLLM"
# vLLM fills a missing logprob with this placeholder (ChatCompletionLogProbsContent's default).
_MISSING_LOGPROB = -9999.0


class VLLMSampler(SamplingBackend):
    """A `SamplingBackend` over a vLLM server's token-in/token-out endpoint."""

    def __init__(self, base_url: str, *, model: str | None = None, timeout_s: float = 600.0,
                 routing_header: str = ROUTING_HEADER, policy_version: int = 0, stream: bool | None = None,
                 max_connections: int = MAX_CONNECTIONS) -> None:
        self.url = base_url.rstrip("/") + "/inference/v1/generate"
        self.model = model
        self.routing_header = routing_header
        self.policy_version = policy_version
        self.stream = stream
        self._http = HttpClient(engine=ENGINE, timeout_s=timeout_s, max_connections=max_connections)

    def request_body(self, prompt_token_ids: Sequence[int], params: SamplingParams,
                     stream: bool = True, *, model: str | None = None) -> dict[str, Any]:
        sampling: dict[str, Any] = {
            "n": 1, "temperature": params.temperature, "top_p": params.top_p,
            "top_k": params.top_k if params.top_k > 0 else -1, "max_tokens": params.max_tokens,
            "stop_token_ids": list(params.stop_token_ids), "logprobs": 0, "detokenize": False,
            "skip_special_tokens": False,
        }
        if params.seed is not None:
            sampling["seed"] = params.seed
        body: dict[str, Any] = {"request_id": uuid.uuid4().hex, "token_ids": _ids(prompt_token_ids),
                                "sampling_params": sampling, "stream": stream}
        model = model or self.model
        if model is not None:
            body["model"] = model
        return body

    async def sample(self, *, prompt_token_ids: Sequence[int], params: SamplingParams,
                     on_token: TokenCallback | None = None) -> SampleResult:
        return await self.sample_as(prompt_token_ids=prompt_token_ids, params=params, on_token=on_token,
                                    model=self.model, policy_version=self.policy_version)

    async def sample_as(self, *, prompt_token_ids: Sequence[int], params: SamplingParams,
                        on_token: TokenCallback | None, model: str | None, policy_version: int) -> SampleResult:
        """`sample` from the served model (or LoRA adapter) `model`, reported as `policy_version`."""
        stream = wants_stream(self.stream, on_token)
        body = self.request_body(prompt_token_ids, params, stream, model=model)
        headers = routing_headers(self.routing_header)
        tokens = TokenStream(engine=ENGINE, on_token=on_token)
        finish = None
        if stream:
            async with contextlib.aclosing(self._http.post_events(self.url, body, headers=headers)) as events:
                async for event in events:
                    finish = _take(event, tokens) or finish
        else:
            for event in await self._http.post(self.url, body, headers=headers):
                finish = _take(event, tokens) or finish
        if finish is None:
            raise SamplingError(f"{ENGINE} answer for request {body['request_id']} has no finish_reason")
        return tokens.result(finish_reason(finish, engine=ENGINE), policy_version=policy_version)

    async def aclose(self) -> None:
        await self._http.aclose()


def _take(event: Any, tokens: TokenStream) -> Any:
    """Add one answer's (or stream event's) tokens to `tokens`; its finish reason, or None."""
    choice = _first_choice(event)
    if choice is None:
        return None  # a usage-only chunk
    tokens.extend(choice["token_ids"], _logprobs(choice))
    return choice.get("finish_reason")


def _ids(token_ids: Sequence[int]) -> Sequence[int]:
    """Token ids as JSON can carry them: a tuple or list as it is, any other sequence as a list."""
    return token_ids if isinstance(token_ids, (tuple, list)) else list(token_ids)


def _first_choice(event: Any) -> Mapping[str, Any] | None:
    try:
        choices = event["choices"]
        if not choices and "usage" in event:
            return None
        choice = choices[0]
        if choice["token_ids"] is None:
            raise SamplingError(f"{ENGINE} answer has token_ids null; the token-in endpoint must return ids")
        return choice
    except (KeyError, IndexError, TypeError) as exc:
        raise SamplingError(f"{ENGINE} answer has no choices[0].token_ids: {str(event)[:300]}") from exc


def _logprobs(choice: Mapping[str, Any]) -> list[Any] | None:
    content = (choice.get("logprobs") or {}).get("content")
    if content is None:
        return None
    logprobs = [entry.get("logprob") if isinstance(entry, dict) else None for entry in content]
    if any(isinstance(value, (int, float)) and value <= _MISSING_LOGPROB for value in logprobs):
        raise SamplingError(f"{ENGINE} returned its missing-logprob placeholder ({_MISSING_LOGPROB}); "
                            "request logprobs (sampling_params.logprobs=0) from a server that supports them")
    return logprobs
