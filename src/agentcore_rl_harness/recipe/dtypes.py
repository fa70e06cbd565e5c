"""Pick the trainer's dtypes by measuring this machine, not by assumption.

bf16 halves the bytes a step moves, but only a CPU with bf16 arithmetic (AVX512-BF16, AMX) turns
that into speed: on an AVX2 EPYC a bf16 matmul in torch 2.13 ran 44x slower than fp32. So the
choice is a start-up micro-benchmark plus the CPU's flags, recorded with its numbers. It measures
the two kinds of work the dtypes decide, each in fp32 and bf16, at the model's width:

    serving   a decode step's shape: a few rows through a bf16 copy of a width x 4*width weight
              (trainer.serve_dtype: the sampler's merged copy)
    training  a forward + backward of Linear(width, 4*width) over a step's tokens under autocast
              (trainer.autocast_dtype)

The width matters: on a 2-core AMX CPU a 128-wide layer ran 0.8x in bf16 where the 576-wide one of
SmolLM2-135M ran 1.4-2.0x (training) and 2.3x (serving). A cheap 128-wide check runs first; where
bf16 is hopeless there (under `HOPELESS`, as on AVX2) the wide one is skipped. Under ~2 s.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

BF16_FLAGS = ("avx512_bf16", "amx_bf16")
SMALL_WIDTH = 128  # the cheap first check (and the width when the model's is unknown)
MAX_WIDTH = 1024  # wider models are measured at this width: the kernels' ratio, in bounded time
HOPELESS = 0.5  # bf16 this much slower at SMALL_WIDTH: not measured wider (an AVX2 CPU: 0.02x)


@dataclass(frozen=True)
class DtypeMeasurement:
    """fp32 / bf16 seconds of the same work; speedup > 1 means bf16 is faster."""

    serve_speedup: float  # a decode step through a bf16 weight copy (trainer.serve_dtype)
    forward_backward_speedup: float  # a training step under autocast (trainer.autocast_dtype)
    cpu_flags: tuple[str, ...]  # the bf16 flags this CPU has (of BF16_FLAGS)
    seconds: float  # what the benchmark cost
    width: int = SMALL_WIDTH  # the layer width it was measured at

    def text(self) -> str:
        flags = ", ".join(self.cpu_flags) or f"none of {', '.join(BF16_FLAGS)}"
        return (f"bf16/fp32 speed at width {self.width}: serving {self.serve_speedup:.2f}x, training "
                f"(forward+backward) {self.forward_backward_speedup:.2f}x (CPU bf16 flags: {flags}; "
                f"measured in {self.seconds:.2f}s)")


def cpu_bf16_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> tuple[str, ...]:
    try:
        words = set(cpuinfo.read_text().split())
    except OSError:
        return ()
    return tuple(flag for flag in BF16_FLAGS if flag in words)


def _best_pair(fp32, bf16, repeats: int) -> tuple[float, float]:
    """Best seconds of each, run in alternation, so a busy moment of a shared machine (other
    processes on the cores) slows both sides rather than one."""
    fp32(), bf16()  # warm: first-call allocation and kernel selection
    best = [float("inf"), float("inf")]
    for _ in range(repeats):
        for index, run in enumerate((fp32, bf16)):
            started = time.perf_counter()
            run()
            best[index] = min(best[index], time.perf_counter() - started)
    return best[0], best[1]


def measure(width: int | None = None, *, tokens: int = 512, rows: int = 16, repeats: int = 3) -> DtypeMeasurement:
    """Time fp32 against bf16 on this CPU at `width` (the model's hidden size, capped at
    MAX_WIDTH; SMALL_WIDTH when unknown): serving is `rows` rows through a width x 4*width weight
    copy, training a forward + backward of Linear(width, 4*width) over `tokens` rows."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one core: the kernels' relative speed, less of the other processes' noise
    started = time.perf_counter()
    try:
        small = _measure(torch, SMALL_WIDTH, tokens, rows, repeats)
        wide = min(width or SMALL_WIDTH, MAX_WIDTH)
        if wide > SMALL_WIDTH and max(small) >= HOPELESS:
            serve, train = _measure(torch, wide, tokens, rows, repeats)
        else:
            (serve, train), wide = small, SMALL_WIDTH
    finally:
        torch.set_num_threads(threads)
    return DtypeMeasurement(serve_speedup=round(serve, 3), forward_backward_speedup=round(train, 3),
                            cpu_flags=cpu_bf16_flags(), seconds=round(time.perf_counter() - started, 3), width=wide)


def _measure(torch, width: int, tokens: int, rows: int, repeats: int) -> tuple[float, float]:
    """(serving, training) speedups of bf16 over fp32 at this width."""
    generator = torch.Generator().manual_seed(0)
    weight = torch.randn(4 * width, width, generator=generator)
    decode = torch.randn(rows, width, generator=generator)
    weight16, decode16 = weight.bfloat16(), decode.bfloat16()
    calls = 16  # one decode step is microseconds: time several

    def serve(x, w):
        def run():
            for _ in range(calls):
                torch.nn.functional.linear(x, w)
        return run

    serve32, serve16 = _best_pair(serve(decode, weight), serve(decode16, weight16), repeats)
    layer = torch.nn.Linear(width, 4 * width)
    inputs = torch.randn(tokens, width, generator=generator)

    def step(dtype):
        def run():
            with torch.autocast("cpu", dtype=dtype or torch.bfloat16, enabled=dtype is not None):
                out = layer(inputs)
            out.float().square().mean().backward()
        return run

    train32, train16 = _best_pair(step(None), step(torch.bfloat16), repeats)
    return serve32 / serve16, train32 / train16
