"""`SGLangSampler`: tokens in, tokens + logprobs out through SGLang's native `POST /generate`.

Pinned to SGLang 0.5 (native API, https://docs.sglang.io/basic_usage/native_api.html and
https://docs.sglang.io/basic_usage/sampling_params.html): the request is `{input_ids,
sampling_params, return_logprob: true, rid, stream}`; an answer has `output_ids` and `meta_info`
with `finish_reason` (`{"type": "stop"|"length", ...}`, null until the last chunk) and
`output_token_logprobs` as `[logprob, token_id, text]` triples.

A turn whose caller does not take tokens as they come (no `on_token`: the gateway's non-streamed
requests) is one JSON request with `stream: false`: one answer, read once. Streamed turns
(`stream=None`, the default, streams exactly the turns with `on_token`; True or False force it):
`/generate` answers `data: <json>` events, then
`data: [DONE]` (errors as `data: {"error": {...}}`), each event shaped like the JSON answer.
`output_ids` are cumulative unless the server runs with `--incremental-streaming-output` (then
each event has only the new ids: pass `incremental_output=True`; recommended when streaming, as a
cumulative stream carries the whole output so far in every event, O(n^2) bytes for n tokens; the
client's own work stays O(new tokens) per event either way); `output_token_logprobs` is read
either way (cumulative or only the new tokens, told apart by its length). Tokens reach
`on_token` as events arrive. See `TokenizerManager._handle_batch_output` in
`sglang/srt/managers/tokenizer_manager.py`.

A cancelled `sample` (the gateway gave up on the turn) posts `POST /abort_request {"rid": ...}`
so the engine stops decoding at once rather than when it notices the closed connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import SamplingError
from ..gateway.sampling import SamplingBackend, TokenCallback
from ..records import SampleResult, SamplingParams
from ._http import (MAX_CONNECTIONS, ROUTING_HEADER, HttpClient, TokenStream, finish_reason, routing_headers,
                    wants_stream)

ENGINE = "SGLang"


class SGLangSampler(SamplingBackend):
    """A `SamplingBackend` over an SGLang server's native generate endpoint."""

    def __init__(self, base_url: str, *, timeout_s: float = 600.0, routing_header: str = ROUTING_HEADER,
                 policy_version: int = 0, stream: bool | None = None, incremental_output: bool = False,
                 max_connections: int = MAX_CONNECTIONS) -> None:
        self.base_url = base_url.rstrip("/")
        self.routing_header = routing_header
        self.policy_version = policy_version
        self.stream = stream
        self.incremental_output = incremental_output
        self._http = HttpClient(engine=ENGINE, timeout_s=timeout_s, max_connections=max_connections)

    def request_body(self, prompt_token_ids: Sequence[int], params: SamplingParams, rid: str,
                     stream: bool = True) -> dict[str, Any]:
        sampling: dict[str, Any] = {
            "temperature": params.temperature, "top_p": params.top_p,
            "top_k": params.top_k if params.top_k > 0 else -1, "max_new_tokens": params.max_tokens,
            "stop_token_ids": list(params.stop_token_ids), "skip_special_tokens": False,
            "no_stop_trim": True,
        }
        if params.seed is not None:
            sampling["sampling_seed"] = params.seed
        input_ids = prompt_token_ids if isinstance(prompt_token_ids, (tuple, list)) else list(prompt_token_ids)
        return {"rid": rid, "input_ids": input_ids, "sampling_params": sampling, "return_logprob": True,
                "stream": stream}

    async def sample(self, *, prompt_token_ids: Sequence[int], params: SamplingParams,
                     on_token: TokenCallback | None = None) -> SampleResult:
        rid = uuid.uuid4().hex
        stream = wants_stream(self.stream, on_token)
        body = self.request_body(prompt_token_ids, params, rid, stream)
        url, headers = f"{self.base_url}/generate", routing_headers(self.routing_header)
        tokens = TokenStream(engine=ENGINE, on_token=on_token)
        finish = None
        try:
            if stream:
                async with contextlib.aclosing(self._http.post_events(url, body, headers=headers)) as events:
                    async for event in events:
                        finish = self._take(event, tokens, rid) or finish
            else:
                for event in await self._http.post(url, body, headers=headers):
                    finish = self._take(event, tokens, rid) or finish
        except asyncio.CancelledError:
            await asyncio.shield(self._abort(rid))
            raise
        if finish is None:
            raise SamplingError(f"{ENGINE} answer for rid {rid} has no meta_info.finish_reason")
        return tokens.result(finish_reason(finish, engine=ENGINE), policy_version=self.policy_version)

    def _take(self, event: Any, tokens: TokenStream, rid: str) -> Any:
        """Add one answer's new tokens to `tokens`; its finish reason type, or None.

        O(new tokens) per event in both modes: a cumulative event's old part is not copied or
        compared again, only the id at the boundary is checked (that it still extends what came)."""
        try:
            meta = event["meta_info"]
            output_ids = event["output_ids"]
            triples = meta.get("output_token_logprobs")
            finish = meta.get("finish_reason")
            seen = len(tokens.token_ids)
            if self.incremental_output:
                new_ids = output_ids
            else:
                if len(output_ids) < seen or (seen and output_ids[seen - 1] != tokens.token_ids[-1]):
                    raise SamplingError(
                        f"{ENGINE} streamed output_ids that do not extend the earlier ones (rid {rid}); if the "
                        "server runs with --incremental-streaming-output, pass incremental_output=True")
                new_ids = output_ids[seen:] if seen else output_ids
            logprobs = None
            if triples is not None:
                new_triples = triples[seen:] if seen and len(triples) == seen + len(new_ids) else triples
                if len(new_triples) != len(new_ids) or any(_token_of(triple) != token_id
                                                           for triple, token_id in zip(new_triples, new_ids)):
                    raise SamplingError(f"{ENGINE} output_token_logprobs do not match output_ids (rid {rid})")
                logprobs = [triple[0] for triple in new_triples]
        except (KeyError, TypeError, AttributeError) as exc:
            raise SamplingError(f"{ENGINE} answer lacks output_ids/meta_info: {str(event)[:300]}") from exc
        tokens.extend(new_ids, logprobs)
        return finish.get("type") if isinstance(finish, Mapping) else finish

    async def _abort(self, rid: str) -> None:
        """Best effort: the engine frees the request's slot; a failure here changes nothing recorded."""
        await self._http.post_quietly(f"{self.base_url}/abort_request", {"rid": rid}, timeout_s=5.0)

    async def aclose(self) -> None:
        await self._http.aclose()


def _token_of(triple: Any) -> int | None:
    try:
        return int(triple[1])
    except (TypeError, ValueError, IndexError):
        return None
