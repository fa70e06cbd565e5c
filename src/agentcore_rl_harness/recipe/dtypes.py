"""Pick the trainer's dtypes by measuring this machine, not by assumption.

bf16 halves the bytes a step moves, but only a CPU with bf16 arithmetic (AVX512-BF16, AMX) turns
that into speed: on an AVX2 EPYC a bf16 matmul in torch 2.13 ran 44x slower than fp32. So the
choice is a start-up micro-benchmark (a matmul, and a forward + backward of a linear layer under
autocast, each in fp32 and bf16; well under a second) plus the CPU's flags, recorded with its
numbers.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

BF16_FLAGS = ("avx512_bf16", "amx_bf16")


@dataclass(frozen=True)
class DtypeMeasurement:
    """fp32 / bf16 seconds of the same work; speedup > 1 means bf16 is faster."""

    matmul_speedup: float
    forward_backward_speedup: float
    cpu_flags: tuple[str, ...]  # the bf16 flags this CPU has (of BF16_FLAGS)
    seconds: float  # what the benchmark cost

    def text(self) -> str:
        flags = ", ".join(self.cpu_flags) or f"none of {', '.join(BF16_FLAGS)}"
        return (f"bf16/fp32 speed: matmul {self.matmul_speedup:.2f}x, forward+backward "
                f"{self.forward_backward_speedup:.2f}x (CPU bf16 flags: {flags}; measured in {self.seconds:.2f}s)")


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


def measure(*, size: int = 128, tokens: int = 256, repeats: int = 3) -> DtypeMeasurement:
    """Time fp32 against bf16 on this CPU: a `size`-square matmul, and a forward + backward of a
    Linear(size, 4 * size) over `tokens` rows under autocast (the trainer's path)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one core: the kernels' relative speed, less of the other processes' noise
    try:
        return _measure(torch, size, tokens, repeats)
    finally:
        torch.set_num_threads(threads)


def _measure(torch, size: int, tokens: int, repeats: int) -> DtypeMeasurement:
    started = time.perf_counter()
    generator = torch.Generator().manual_seed(0)
    a = torch.randn(size, size, generator=generator)
    b = torch.randn(size, 4 * size, generator=generator)
    a16, b16 = a.bfloat16(), b.bfloat16()
    matmul32, matmul16 = _best_pair(lambda: a @ b, lambda: a16 @ b16, repeats)
    layer = torch.nn.Linear(size, 4 * size)
    inputs = torch.randn(tokens, size, generator=generator)

    def step(dtype):
        def run():
            with torch.autocast("cpu", dtype=dtype, enabled=dtype is not None):
                out = layer(inputs)
            out.float().square().mean().backward()
        return run

    fb32, fb16 = _best_pair(step(None), step(torch.bfloat16), repeats)
    return DtypeMeasurement(matmul_speedup=round(matmul32 / matmul16, 3),
                            forward_backward_speedup=round(fb32 / fb16, 3),
                            cpu_flags=cpu_bf16_flags(), seconds=round(time.perf_counter() - started, 3))
