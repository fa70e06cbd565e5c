"""The `sampler` node (`conf/sampler/*.yaml`): which engine serves the policy, with its settings."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .hosted import HostedSettings
from .vllm_engine import VLLMSettings

if TYPE_CHECKING:
    from .hf_local import HFLocalSampler


@dataclass(frozen=True)
class SamplerConfig:
    """The `sampler` group: the engine that samples the policy's turns for the gateway."""

    kind: str = "hf"  # hf: the in-process transformers sampler, batched across concurrent sessions
    max_batch_size: int = 16  # decode requests batched together
    batch_wait_s: float = 0.005  # how long a batch waits for more requests
    prefix_cache_tokens: int = 32768  # KV prefix cache size in tokens (0 = off); ~45 KiB/token for SmolLM2
    vllm: VLLMSettings = field(default_factory=VLLMSettings)  # sampler=vllm (samplers/vllm_engine.py)
    hosted: HostedSettings = field(default_factory=HostedSettings)  # sampler=hosted: eval baseline (samplers/hosted.py)

    def local_sampler(self, model: Any) -> HFLocalSampler:
        """`sampler=hf`'s engine over the in-process `model`, batched and prefix-cached as set here."""
        from .hf_local import HFLocalSampler  # torch: imported when the sampler is built

        return HFLocalSampler(model, max_batch_size=self.max_batch_size, batch_wait_s=self.batch_wait_s,
                              prefix_cache_tokens=self.prefix_cache_tokens)
