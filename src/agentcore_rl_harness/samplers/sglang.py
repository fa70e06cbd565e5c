"""`SGLangSampler`: tokens in, tokens + logprobs out through SGLang's native `POST /generate`.

Pinned to SGLang 0.5 (native API, https://docs.sglang.io/basic_usage/native_api.html and
https://docs.sglang.io/basic_usage/sampling_params.html): the request is `{input_ids,
sampling_params, return_logprob: true, rid, stream: false}`; the answer has `output_ids` and
`meta_info` with `finish_reason` (`{"type": "stop"|"length", ...}`) and `output_token_logprobs`
as `[logprob, token_id, text]` triples. A cancelled `sample` (the client went away) posts
`POST /abort_request {"rid": ...}` so the engine stops decoding.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from typing import Any

import httpx

from ..errors import SamplingError
from ..gateway.sampling import TokenCallback
from ..records import SampleResult, SamplingParams
from ._http import ROUTING_HEADER, checked_result, finish_reason, post_json, routing_headers

ENGINE = "SGLang"


class SGLangSampler:
    """A `SamplingBackend` over an SGLang server's native generate endpoint."""

    def __init__(self, base_url: str, *, timeout_s: float = 600.0, routing_header: str = ROUTING_HEADER,
                 policy_version: int = 0, client: httpx.AsyncClient | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.routing_header = routing_header
        self.policy_version = policy_version
        self._client = client or httpx.AsyncClient(timeout=timeout_s)

    @staticmethod
    def request_body(prompt_token_ids: Sequence[int], params: SamplingParams, rid: str) -> dict[str, Any]:
        sampling: dict[str, Any] = {
            "temperature": params.temperature, "top_p": params.top_p,
            "top_k": params.top_k if params.top_k > 0 else -1, "max_new_tokens": params.max_tokens,
            "stop_token_ids": list(params.stop_token_ids), "skip_special_tokens": False,
            "no_stop_trim": True,
        }
        if params.seed is not None:
            sampling["sampling_seed"] = params.seed
        return {"rid": rid, "input_ids": [int(t) for t in prompt_token_ids], "sampling_params": sampling,
                "return_logprob": True, "stream": False}

    async def sample(self, *, prompt_token_ids: Sequence[int], params: SamplingParams,
                     on_token: TokenCallback | None = None) -> SampleResult:
        rid = uuid.uuid4().hex
        body = self.request_body(prompt_token_ids, params, rid)
        try:
            data = await post_json(self._client, f"{self.base_url}/generate", body, engine=ENGINE,
                                   headers=routing_headers(self.routing_header))
        except asyncio.CancelledError:
            await asyncio.shield(self._abort(rid))
            raise
        try:
            meta = data["meta_info"]
            token_ids = data["output_ids"]
            finish = (meta.get("finish_reason") or {}).get("type")
            triples = meta.get("output_token_logprobs")
        except (KeyError, TypeError, AttributeError) as exc:
            raise SamplingError(f"{ENGINE} answer lacks output_ids/meta_info: {str(data)[:300]}") from exc
        logprobs = None
        if triples is not None:
            if [int(triple[1]) for triple in triples] != [int(t) for t in token_ids]:
                raise SamplingError(f"{ENGINE} output_token_logprobs do not match output_ids (rid {rid})")
            logprobs = [triple[0] for triple in triples]
        return checked_result(token_ids, logprobs, finish_reason(finish, engine=ENGINE), engine=ENGINE,
                              policy_version=self.policy_version, on_token=on_token)

    async def _abort(self, rid: str) -> None:
        """Best effort: the engine frees the request's slot; a failure here changes nothing recorded."""
        try:
            await self._client.post(f"{self.base_url}/abort_request", json={"rid": rid}, timeout=5.0)
        except httpx.HTTPError:
            pass  # the server is gone or busy; the request dies with it

    async def aclose(self) -> None:
        await self._client.aclose()
