"""The heap trimmer gives freed malloc memory back to the OS (glibc), in a real subprocess."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from agentcore_rl_harness import heap

FRAGMENT = textwrap.dedent(
    """
    import ctypes, os, sys, time
    from agentcore_rl_harness import heap

    libc = ctypes.CDLL("libc.so.6")
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]

    def rss_mib():
        with open("/proc/self/status") as f:
            return next(int(l.split()[1]) for l in f if l.startswith("VmRSS")) // 1024

    # 1 MiB blocks from the heap (not mmap: M_MMAP_THRESHOLD = -3 raised to 32 MiB, as glibc's
    # dynamic threshold does after big tensors are freed); every other one is freed, so the holes
    # cannot merge with each other or with the heap's top and free() alone gives nothing back
    libc.mallopt(-3, 32 << 20)
    blocks = []
    for _ in range(400):
        block = libc.malloc(1 << 20)
        ctypes.memset(block, 1, 1 << 20)
        blocks.append(block)
    for block in blocks[::2]:
        libc.free(block)
    before = rss_mib()
    started = heap.start_heap_trimmer(float(sys.argv[1]))
    time.sleep(1.0)
    print(before, rss_mib(), started)
    """
)


def _run(interval: str) -> tuple[int, int, bool]:
    out = subprocess.run(
        [sys.executable, "-c", FRAGMENT, interval], capture_output=True, text=True, timeout=60, check=True
    ).stdout.split()
    return int(out[0]), int(out[1]), out[2] == "True"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="malloc_trim is glibc's")
def test_the_trimmer_returns_freed_heap_pages_and_zero_turns_it_off():
    before, after, started = _run("0.1")
    assert started and before >= 400  # 200 MiB freed but still resident
    assert after < before - 150
    before, after, started = _run("0")
    assert not started and after >= before - 20


def test_start_is_idempotent_and_the_env_sets_the_interval(monkeypatch):
    assert heap.start_heap_trimmer(60.0) is True
    first = heap._thread
    assert heap.start_heap_trimmer(60.0) is True and heap._thread is first
    monkeypatch.setenv(heap.ENV, "0")
    assert heap.interval_from_env() == 0.0


@pytest.mark.parametrize("raw", ["fast", "-1", "nan"])
def test_a_bad_env_value_names_the_variable_and_the_fix(monkeypatch, raw):
    monkeypatch.setenv(heap.ENV, raw)
    with pytest.raises(ValueError, match=rf"{heap.ENV}=.*(seconds|>= 0)"):
        heap.interval_from_env()
