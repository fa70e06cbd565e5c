"""`VLLMPolicySampler`: `sampler=vllm` in a run, the embedded trainer's weights synced to the engine.

Samples go through `VLLMSampler` (tokens in, tokens and logprobs out). `publish_weights` (the
`WeightSync` seam the local trainer already calls after each update) sends the new policy to the
engine, by what the trainer hands it:
- a model carrying peft LoRA layers (`trainer.finetune=lora`, `trainer.serve_merged=false`): the
  adapter is written to `<adapter_dir>/v<N>` and loaded under a new name, `policy-<tag>-v<N>` (the
  tag is this sampler's own, so runs sharing a server never clash), through
  `POST /v1/load_lora_adapter`; later turns name that adapter as their `model`. The adapter two
  versions back is unloaded (the previous one may still be decoding a turn in flight).
- a plain model (full fine-tuning, or LoRA merged into a copy with `serve_merged=true`): its
  weights are written to `<adapter_dir>/full` and reloaded in place through `POST /collective_rpc
  {"method": "reload_weights"}` once the turns in flight have finished; new turns wait for it.
Each turn takes the adapter name and version current when it starts, so a turn in flight finishes
on the version it started with, and its `SampleResult.policy_version` says which. A failed sync
raises `SamplingError` (the engine's answer in it); the trainer's step fails with it, and what the
run recorded so far stays on disk.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import urllib.error
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import SamplingError
from ..gateway.sampling import SamplingBackend, TokenCallback
from ..records import SampleResult, SamplingParams
from .vllm import VLLMSampler
from .vllm_engine import VLLMEngine, http_json

ADAPTER_PREFIX = "policy"


class VLLMPolicySampler(SamplingBackend):
    """A `SamplingBackend` and `WeightSync` over one `VLLMEngine`; `close()` stops a launched engine."""

    def __init__(self, engine: VLLMEngine, *, adapter_dir: str | Path) -> None:
        if engine.served_model is None:
            raise ValueError("VLLMPolicySampler needs a started engine (VLLMEngine.start())")
        self.engine = engine
        self.adapter_dir = Path(adapter_dir)
        self.client = VLLMSampler(engine.base_url, model=engine.served_model, timeout_s=engine.settings.timeout_s)
        self.lock = threading.Lock()  # the trainer holds it while it writes weights; nothing here decodes
        self.policy_version = 0
        self.model_name = engine.served_model
        self.sync_seconds: list[float] = []  # one per publish, for the run's metrics and benches
        self._loaded: list[str] = []
        self.tag = uuid.uuid4().hex[:8]  # adapter names unique to this sampler: a server you run may hold others
        self._inflight = 0
        self._count = threading.Condition()
        self._reloading = False

    async def sample(self, *, prompt_token_ids: Sequence[int], params: SamplingParams,
                     on_token: TokenCallback | None = None) -> SampleResult:
        while self._reloading:  # a full-weight reload is waiting for the turns in flight
            await asyncio.sleep(0.01)
        with self._count:
            self._inflight += 1
            model, version = self.model_name, self.policy_version
        try:
            return await self.client.sample_as(prompt_token_ids=prompt_token_ids, params=params, on_token=on_token,
                                               model=model, policy_version=version)
        finally:
            with self._count:
                self._inflight -= 1
                self._count.notify_all()

    def settle(self) -> None:
        """`publish_weights` returns once vLLM serves the new weights: nothing to wait for."""

    def publish_weights(self, weights: Any, *, policy_version: int) -> None:
        started = time.perf_counter()
        if getattr(weights, "peft_config", None):  # the model's own attribute, set by peft's injection
            self._push_adapter(weights, policy_version)
        else:
            self._reload_full(weights, policy_version)
        self.sync_seconds.append(time.perf_counter() - started)

    def _push_adapter(self, model: Any, version: int) -> None:
        from peft import get_peft_model_state_dict
        from safetensors.torch import save_file

        folder = self.adapter_dir / f"v{version}"
        folder.mkdir(parents=True, exist_ok=True)
        state = {key: value.detach().to("cpu").contiguous()
                 for key, value in get_peft_model_state_dict(model).items()}
        save_file(state, str(folder / "adapter_model.safetensors"))
        config = model.peft_config["default"].to_dict()
        config["base_model_name_or_path"] = self.engine.model_dir
        config = {k: (sorted(v) if isinstance(v, set) else v) for k, v in config.items()}
        (folder / "adapter_config.json").write_text(json.dumps(config, default=str))
        name = f"{ADAPTER_PREFIX}-{self.tag}-v{version}"
        self._post("/v1/load_lora_adapter", {"lora_name": name, "lora_path": str(folder)}, version)
        with self._count:
            self.model_name, self.policy_version = name, version
        self._loaded.append(name)
        while len(self._loaded) > 2:  # the previous adapter may be decoding a turn in flight
            self._post("/v1/unload_lora_adapter", {"lora_name": self._loaded.pop(0)}, version)

    def _reload_full(self, model: Any, version: int) -> None:
        folder = self.adapter_dir / "full"
        model.save_pretrained(str(folder), safe_serialization=True)
        self._reloading = True
        try:
            with self._count:
                self._count.wait_for(lambda: self._inflight == 0)
            self._post("/collective_rpc", {"method": "reload_weights", "kwargs": {"weights_path": str(folder)}},
                       version)
            with self._count:
                self.model_name, self.policy_version = self.engine.served_model, version
        finally:
            self._reloading = False

    def _post(self, path: str, body: dict[str, Any], version: int) -> None:
        url = self.engine.base_url + path
        try:
            http_json(url, body, timeout_s=self.engine.settings.timeout_s)
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")[:500]
            raise SamplingError(
                f"weight sync of policy version {version} to vLLM failed: {path} answered {exc.code}: {detail}; "
                "start vLLM with VLLM_ALLOW_RUNTIME_LORA_UPDATING=True and VLLM_SERVER_DEV_MODE=1 (the launcher "
                "does), and --enable-lora with --max-lora-rank >= trainer.lora_rank") from exc
        except (OSError, ValueError) as exc:
            raise SamplingError(f"weight sync of policy version {version} to vLLM failed: {url}: {exc}; "
                                f"is the engine still running? (its log: {self.engine.log_path})") from exc

    def close(self) -> None:
        """Stop a launched engine; on a server you run, unload this sampler's adapters (best effort)."""
        if self.engine.launched:
            self.engine.stop()
            return
        for name in self._loaded:
            try:
                http_json(self.engine.base_url + "/v1/unload_lora_adapter", {"lora_name": name}, timeout_s=10.0)
            except (OSError, ValueError):
                pass
        self._loaded.clear()

    async def aclose(self) -> None:
        await self.client.aclose()


def start_policy_sampler(settings: Any, *, model_dir: str | Path, tokenizer: Any,
                         run_dir: str | Path | None) -> VLLMPolicySampler:
    """`sampler=vllm` of a run: the engine started (or reached) and checked, its sampler."""
    from .vllm_engine import settings_from

    settings = settings_from(settings)
    run_dir = Path(run_dir) if run_dir is not None else Path.cwd()
    engine = VLLMEngine(settings, model_dir=model_dir, tokenizer=tokenizer, log_dir=run_dir).start()
    return VLLMPolicySampler(engine, adapter_dir=settings.adapter_dir or run_dir / "vllm-adapters")
