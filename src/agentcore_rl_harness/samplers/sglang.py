"""`SGLangSampler`: tokens in, tokens + logprobs out through SGLang's native `POST /generate`.

Pinned to SGLang 0.5 (native API, https://docs.sglang.io/basic_usage/native_api.html and
https://docs.sglang.io/basic_usage/sampling_params.html): the request is `{input_ids,
sampling_params, return_logprob: true, rid, stream}`; an answer has `output_ids` and `meta_info`
with `finish_reason` (`{"type": "stop"|"length", ...}`, null until the last chunk) and
`output_token_logprobs` as `[logprob, token_id, text]` triples.

Streaming (`stream=True`, the default): `/generate` answers `data: <json>` events, then
`data: [DONE]` (errors as `data: {"error": {...}}`), each event shaped like the JSON answer.
`output_ids` are cumulative unless the server runs with `--incremental-streaming-output` (then
each event has only the new ids: pass `incremental_output=True`); `output_token_logprobs` is
read either way (cumulative or only the new tokens, told apart by its length). Tokens reach
`on_token` as events arrive. See `TokenizerManager._handle_batch_output` in
`sglang/srt/managers/tokenizer_manager.py`.

A cancelled `sample` (the gateway gave up on the turn) posts `POST /abort_request {"rid": ...}`
so the engine stops decoding at once rather than when it notices the closed connection.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from ..errors import SamplingError
from ..gateway.sampling import TokenCallback
from ..records import SampleResult, SamplingParams
from ._http import ROUTING_HEADER, TokenStream, finish_reason, post_events, routing_headers

ENGINE = "SGLang"


class SGLangSampler:
    """A `SamplingBackend` over an SGLang server's native generate endpoint."""

    def __init__(self, base_url: str, *, timeout_s: float = 600.0, routing_header: str = ROUTING_HEADER,
                 policy_version: int = 0, stream: bool = True, incremental_output: bool = False,
                 client: httpx.AsyncClient | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.routing_header = routing_header
        self.policy_version = policy_version
        self.stream = stream
        self.incremental_output = incremental_output
        self._client = client or httpx.AsyncClient(timeout=timeout_s)

    def request_body(self, prompt_token_ids: Sequence[int], params: SamplingParams, rid: str) -> dict[str, Any]:
        sampling: dict[str, Any] = {
            "temperature": params.temperature, "top_p": params.top_p,
            "top_k": params.top_k if params.top_k > 0 else -1, "max_new_tokens": params.max_tokens,
            "stop_token_ids": list(params.stop_token_ids), "skip_special_tokens": False,
            "no_stop_trim": True,
        }
        if params.seed is not None:
            sampling["sampling_seed"] = params.seed
        return {"rid": rid, "input_ids": [int(t) for t in prompt_token_ids], "sampling_params": sampling,
                "return_logprob": True, "stream": self.stream}

    async def sample(self, *, prompt_token_ids: Sequence[int], params: SamplingParams,
                     on_token: TokenCallback | None = None) -> SampleResult:
        rid = uuid.uuid4().hex
        body = self.request_body(prompt_token_ids, params, rid)
        tokens = TokenStream(engine=ENGINE, on_token=on_token)
        finish = None
        try:
            async for event in post_events(self._client, f"{self.base_url}/generate", body, engine=ENGINE,
                                           headers=routing_headers(self.routing_header)):
                finish = self._take(event, tokens, rid) or finish
        except asyncio.CancelledError:
            await asyncio.shield(self._abort(rid))
            raise
        if finish is None:
            raise SamplingError(f"{ENGINE} answer for rid {rid} has no meta_info.finish_reason")
        return tokens.result(finish_reason(finish, engine=ENGINE), policy_version=self.policy_version)

    def _take(self, event: Any, tokens: TokenStream, rid: str) -> Any:
        """Add one answer's new tokens to `tokens`; its finish reason type, or None."""
        try:
            meta = event["meta_info"]
            output_ids = [int(t) for t in event["output_ids"]]
            triples = meta.get("output_token_logprobs")
            finish = meta.get("finish_reason")
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise SamplingError(f"{ENGINE} answer lacks output_ids/meta_info: {str(event)[:300]}") from exc
        seen = len(tokens.token_ids)
        if self.incremental_output:
            new_ids = output_ids
        else:
            if output_ids[:seen] != tokens.token_ids:
                raise SamplingError(f"{ENGINE} streamed output_ids that do not extend the earlier ones (rid {rid}); "
                                    "if the server runs with --incremental-streaming-output, pass incremental_output=True")
            new_ids = output_ids[seen:]
        logprobs = None
        if triples is not None:
            new_triples = triples[seen:] if len(triples) == seen + len(new_ids) else triples
            if [_token_of(triple) for triple in new_triples] != new_ids:
                raise SamplingError(f"{ENGINE} output_token_logprobs do not match output_ids (rid {rid})")
            logprobs = [triple[0] for triple in new_triples]
        tokens.extend(new_ids, logprobs)
        return finish.get("type") if isinstance(finish, Mapping) else finish

    async def _abort(self, rid: str) -> None:
        """Best effort: the engine frees the request's slot; a failure here changes nothing recorded."""
        try:
            await self._client.post(f"{self.base_url}/abort_request", json={"rid": rid}, timeout=5.0)
        except httpx.HTTPError:
            pass  # the server is gone or busy; the request dies with it

    async def aclose(self) -> None:
        await self._client.aclose()


def _token_of(triple: Any) -> int | None:
    try:
        return int(triple[1])
    except (TypeError, ValueError, IndexError):
        return None
