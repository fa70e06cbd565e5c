"""The Tinker HTTP API (the part the official `tinker` SDK's training and sampling loop uses).

JSON everywhere except the forward_backward request and the forward_backward / sample results,
which are protobuf. Errors are JSON `{"error": ..., "type": ...}` with 400 / 401 / 404 / 410 /
413; a failed future answers `{"error", "category"}` with 200, as Tinker does.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from .bodies import lora_spec, required_int, sample_spec
from .engine import Engine
from .errors import BadRequest, Gone, NotFound, TinkerServerError
from .futures import FutureTable
from .wire import decode_forward_backward, encode_forward_backward_result, encode_sample_output

log = logging.getLogger("agentcore_rl_harness.tinker_server")

PROTOBUF = "application/x-protobuf"
ADAM_DEFAULTS = {"learning_rate": 1e-4, "beta1": 0.9, "beta2": 0.95, "eps": 1e-12, "weight_decay": 0.0,
                 "grad_clip_norm": 0.0}
CLIENT_CONFIG = {
    "pjwt_auth_enabled": False, "use_pyqwest_transport": False, "proto_compress_fwdbwd": False,
    "sample_use_retrieve_futures": False, "sample_join_sampling_session": False,
    "custom_loss_server_side": False,
}


class PayloadTooLarge(TinkerServerError):
    status = 413


class Unauthorized(TinkerServerError):
    status = 401


@dataclass
class SessionState:
    session_id: str
    metadata: dict[str, Any] = field(default_factory=dict)
    finished: bool = False
    model_seq_ids: set[int] = field(default_factory=set)
    last_seen: float = field(default_factory=time.monotonic)
    """When the client last called with this session (the SDK heartbeats every 10 s)."""


def create_app(*, engine: Engine, futures: FutureTable, api_key: str | None, max_body_bytes: int,
               poll_wait_s: float, session_timeout_s: float | None = 120.0) -> Starlette:
    """`session_timeout_s`: a session silent this long (no heartbeat, no call: its client died
    without finishing it) is finished and its models freed when the next session or model is
    created; None keeps sessions until they are finished."""
    sessions: dict[str, SessionState] = {}

    def session(session_id: str | None) -> SessionState:
        found = sessions.get(session_id or "")
        if found is None:
            raise NotFound(f"unknown session_id {session_id!r}; a ServiceClient creates one on first use")
        if found.finished:
            raise Gone(f"session {session_id} is finished")
        found.last_seen = time.monotonic()
        return found

    async def reap_stale_sessions() -> None:
        if session_timeout_s is None:
            return
        now = time.monotonic()
        for state in [s for s in sessions.values() if not s.finished and now - s.last_seen > session_timeout_s]:
            state.finished = True
            await in_thread(engine.release_session, state.session_id)
            log.warning("session %s sent nothing for %.0f s (> %.0f s): finished, its models released",
                        state.session_id, now - state.last_seen, session_timeout_s)

    async def body_bytes(request: Request) -> bytes:
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > max_body_bytes:
            raise PayloadTooLarge(f"request body of {declared} bytes exceeds the limit of {max_body_bytes}")
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > max_body_bytes:
                raise PayloadTooLarge(f"request body exceeds the limit of {max_body_bytes} bytes")
            chunks.append(chunk)
        body = b"".join(chunks)
        if request.headers.get("content-encoding", "").lower() == "zstd":
            import zstandard

            try:
                body = zstandard.ZstdDecompressor().decompress(body, max_output_size=max_body_bytes)
            except zstandard.ZstdError as exc:
                raise BadRequest(f"cannot decompress the zstd body: {exc}") from exc
        return body

    async def json_body(request: Request) -> dict[str, Any]:
        raw = await body_bytes(request)
        try:
            value = json.loads(raw or b"{}")
        except ValueError as exc:
            raise BadRequest(f"the request body is not JSON: {exc}") from exc
        if not isinstance(value, dict):
            raise BadRequest("the request body must be a JSON object")
        return value

    def route(path: str, handler: Callable[[Request], Awaitable[Response]], method: str = "POST") -> Route:
        async def endpoint(request: Request) -> Response:
            try:
                if api_key is not None and not hmac.compare_digest(
                        request.headers.get("x-api-key", "").encode(), api_key.encode()):
                    raise Unauthorized("missing or wrong API key (X-API-Key); pass the server's --api-key")
                return await handler(request)
            except TinkerServerError as exc:
                return JSONResponse({"error": str(exc), "type": type(exc).__name__}, status_code=exc.status)
        return Route(path, endpoint, methods=[method])

    def future(request_id: str, model_id: str | None = None, **extra: Any) -> JSONResponse:
        body: dict[str, Any] = {"request_id": request_id, **extra}
        if model_id is not None:
            body["model_id"] = model_id
        return JSONResponse(body)

    async def in_thread(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return await asyncio.to_thread(function, *args, **kwargs)

    # -- service ---------------------------------------------------------------------------------

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def capabilities(request: Request) -> Response:
        return JSONResponse({"supported_models": [
            {"model_name": engine.base_model_name, "max_context_length": engine.context_length or None,
             "trainable": True, "sampleable": True}]})

    async def client_config(request: Request) -> Response:
        await json_body(request)
        return JSONResponse(CLIENT_CONFIG)

    async def dynamic_config(request: Request) -> Response:
        await json_body(request)
        return JSONResponse({"refresh_interval_sec": 300, "sample_cancel_enabled": False})

    async def create_session(request: Request) -> Response:
        body = await json_body(request)
        await reap_stale_sessions()
        session_id = f"sess-{uuid.uuid4().hex[:16]}"
        sessions[session_id] = SessionState(session_id, {"tags": body.get("tags"),
                                                         "user_metadata": body.get("user_metadata")})
        log.info("session %s created (sdk %s)", session_id, body.get("sdk_version"))
        return JSONResponse({"type": "create_session", "session_id": session_id})

    async def heartbeat(request: Request) -> Response:
        session((await json_body(request)).get("session_id"))
        return JSONResponse({"type": "session_heartbeat"})

    async def finish_session(request: Request) -> Response:
        await json_body(request)
        state = session(request.path_params["session_id"])
        state.finished = True
        await in_thread(engine.release_session, state.session_id)
        log.info("session %s finished; its models were released", state.session_id)
        return JSONResponse({})

    async def telemetry(request: Request) -> Response:
        await body_bytes(request)
        return JSONResponse({"status": "accepted"})

    # -- training --------------------------------------------------------------------------------

    async def create_model(request: Request) -> Response:
        body = await json_body(request)
        state = session(body.get("session_id"))
        await reap_stale_sessions()
        engine.check_base_model(body.get("base_model"))
        optimizer = (body.get("optimizer_config") or {}).get("type", "adamw")
        if optimizer != "adamw":
            raise BadRequest(f"optimizer {optimizer!r} is not implemented here; use the default Adam")
        lora = body.get("lora_config")
        if not isinstance(lora, dict) or "rank" not in lora:
            raise BadRequest("create_model needs lora_config with a rank; this server trains LoRA adapters only")
        spec = lora_spec(lora)
        seq_id = required_int(body, "model_seq_id")
        state.model_seq_ids.add(seq_id)
        model_id = f"{state.session_id}:train:{seq_id}"

        def work() -> dict[str, Any]:
            engine.create_model(session_id=state.session_id, model_seq_id=seq_id, lora=spec)
            return {"type": "create_model", "model_id": model_id}

        return future(futures.submit(work), model_id)

    async def get_info(request: Request) -> Response:
        body = await json_body(request)
        return JSONResponse(await in_thread(engine.info, str(body.get("model_id"))))

    async def forward_backward(request: Request) -> Response:
        call = decode_forward_backward(await body_bytes(request))
        engine.model(call.model_id)
        from .losses import loss_function

        loss_function(call.loss_fn)
        return future(futures.submit(lambda: encode_forward_backward_result(engine.forward_backward(call))),
                      call.model_id)

    async def optim_step(request: Request) -> Response:
        body = await json_body(request)
        model_id = str(body.get("model_id"))
        engine.model(model_id)
        if "optimizer_params" in body:
            raise BadRequest("only AdamParams are implemented by this server")
        params = body.get("adam_params") or body.get("optim_params") or {}
        adam = {key: float(params.get(key, default)) for key, default in ADAM_DEFAULTS.items()}
        return future(futures.submit(lambda: {"type": "optim_step", "metrics": engine.optim_step(model_id, adam)}),
                      model_id)

    async def save_weights(request: Request) -> Response:
        body = await json_body(request)
        model_id = str(body.get("model_id"))
        engine.model(model_id)
        name = body.get("path") or f"state-{uuid.uuid4().hex[:8]}"
        overwrite = bool(body.get("overwrite", False))

        def work() -> dict[str, Any]:
            return {"type": "save_weights", "path": engine.save(model_id, kind="weights", name=name,
                                                                  overwrite=overwrite)}

        return future(futures.submit(work), model_id)

    async def load_weights(request: Request) -> Response:
        body = await json_body(request)
        path, optimizer = str(body.get("path")), bool(body.get("optimizer", False))
        if body.get("session_id") is not None:
            state = session(body["session_id"])
            seq_id = required_int(body, "model_seq_id")
            engine.check_base_model(body.get("base_model"))
            model_id = f"{state.session_id}:train:{seq_id}"

            def create() -> dict[str, Any]:
                engine.create_from_state(session_id=state.session_id, model_seq_id=seq_id, uri=path,
                                         optimizer=optimizer)
                return {"type": "load_weights", "path": path, "model_id": model_id}

            return future(futures.submit(create), model_id)
        model_id = str(body.get("model_id"))
        engine.model(model_id)

        def load() -> dict[str, Any]:
            engine.load(model_id, path, optimizer=optimizer)
            return {"type": "load_weights", "path": path, "model_id": model_id}

        return future(futures.submit(load), model_id)

    async def save_for_sampler(request: Request) -> Response:
        body = await json_body(request)
        model_id = str(body.get("model_id"))
        model = engine.model(model_id)
        name = body.get("path")
        if name is not None:
            return future(futures.submit(lambda: {"type": "save_weights_for_sampler",
                                                  "path": engine.save(model_id, kind="sampler_weights", name=name)}),
                          model_id)
        if body.get("kind", "snapshot") != "snapshot":
            raise BadRequest(f"sampling client kind {body.get('kind')!r} is not implemented; use 'snapshot'")
        return future(futures.submit(lambda: {"type": "save_weights_for_sampler",
                                              "sampling_session_id": engine.snapshot_sampler(model_id, model.session_id)}),
                      model_id)

    # -- sampling --------------------------------------------------------------------------------

    async def create_sampling_session(request: Request) -> Response:
        body = await json_body(request)
        state = session(body.get("session_id"))
        if body.get("model_path") is None and body.get("base_model") is None:
            raise BadRequest("create_sampling_session needs model_path or base_model")
        sampler_id = await in_thread(engine.create_sampler, session_id=state.session_id,
                                     model_path=body.get("model_path"), base_model=body.get("base_model"))
        return JSONResponse({"type": "create_sampling_session", "sampling_session_id": sampler_id})

    async def get_sampler(request: Request) -> Response:
        return JSONResponse(await in_thread(engine.sampler_info, request.path_params["sampler_id"]))

    async def asample(request: Request) -> Response:
        body = await json_body(request)
        spec = sample_spec(body, engine)
        one_off = body.get("sampling_session_id") is None
        if one_off:  # sampling by model_path / base_model, without a sampling session
            sampler_id = await in_thread(engine.create_sampler, session_id="", model_path=body.get("model_path"),
                                         base_model=body.get("base_model"))
        else:
            sampler_id = engine.sampler(str(body["sampling_session_id"])).sampler_id

        def work() -> bytes:
            try:
                return encode_sample_output(engine.sample(sampler_id, spec))
            finally:
                if one_off:
                    engine.drop_sampler(sampler_id)

        sequence_ids = [f"{sampler_id}:{body.get('seq_id', 0)}:{index}" for index in range(spec.num_samples)]
        request_id = futures.submit(work)
        return future(request_id, sample_sequence_ids=sequence_ids)

    async def retrieve_future(request: Request) -> Response:
        body = await json_body(request)
        record = await futures.retrieve(str(body.get("request_id")), poll_wait_s)
        if record is None:
            return JSONResponse({"type": "try_again", "request_id": body.get("request_id"), "queue_state": "active"})
        if isinstance(record.result, bytes):
            return Response(record.result, media_type=PROTOBUF)
        return JSONResponse(record.result)

    return Starlette(routes=[
        route("/api/v1/healthz", healthz, "GET"),
        route("/api/v1/get_server_capabilities", capabilities, "GET"),
        route("/api/v1/client/config", client_config),
        route("/api/v1/client/dynamic_config", dynamic_config),
        route("/api/v1/create_session", create_session),
        route("/api/v1/session_heartbeat", heartbeat),
        route("/api/v1/sessions/{session_id}/finish", finish_session),
        route("/api/v1/telemetry", telemetry),
        route("/api/v1/create_model", create_model),
        route("/api/v1/get_info", get_info),
        route("/api/v1/forward_backward", forward_backward),
        route("/api/v1/optim_step", optim_step),
        route("/api/v1/save_weights", save_weights),
        route("/api/v1/load_weights", load_weights),
        route("/api/v1/save_weights_for_sampler", save_for_sampler),
        route("/api/v1/create_sampling_session", create_sampling_session),
        route("/api/v1/samplers/{sampler_id}", get_sampler, "GET"),
        route("/api/v1/asample", asample),
        route("/api/v1/retrieve_future", retrieve_future),
    ])

