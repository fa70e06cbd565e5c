"""How fast `agentcore-rl view` opens and filters a large run directory.

Generates a run directory of `--rollouts` records (default 50,000; each one trace of `--tokens`
ids with masks and logprobs, in the store's line format: `traces` last) plus one 300-turn session
tokenized with the `tiny` model's tokenizer, then times, in one process, what the server does
per request:

    open      index built from nothing (one pass over rollouts.jsonl) + the run page's first 100 rows
    reopen    the run page again (the index is kept; one stat finds nothing new)
    filter    outcome=failure, and a text search, each a rendered page
    tail      one rollout appended, then the index refreshed (what a live poll costs)
    long      the 300-turn rollout's page (its transcript, and the token view's first page)

and, against a real `agentcore-rl view` process, the same pages over HTTP (first request cold).
Each line gives wall time and this process's CPU time (HTTP lines: the client's CPU only, so
read their wall time). Usage: python bench/viewer.py [--rollouts 50000] [--tokens 256] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from agentcore_rl_harness.records import Rollout, Status, Trace, Usage
from agentcore_rl_harness.store import RunStore, encode_rollout

TURNS = 300


def _record(number: int, tokens: int, rng: random.Random) -> str:
    success = rng.random() < 0.6
    prompt = tokens * 2 // 3
    completion = tokens - prompt
    head = {
        "schema_version": 1, "run_id": "bench", "task": f"task_{number % 7}",
        "row_id": f"row{number // 8}", "sample_index": number % 8, "group_id": f"g{number // 8}",
        "phase": ("pre", "train", "post")[number % 3], "step": number // 512,
        "session_id": f"session-{number:06d}",
        "status": "completed" if success else rng.choice(["task_failed", "timeout", "agent_error"]),
        "error": None if success else f"AssertionError: wrong answer {rng.randint(0, 99)}",
        "reward": 1.0 if success else 0.0, "rewards": {"exact": float(success), "format": 1.0},
        "success": success, "result": {"answer": rng.randint(0, 999)}, "turns": 4,
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion},
        "elapsed_s": round(rng.uniform(1, 300), 2),
    }
    trace = {"token_ids": [rng.randrange(49152) for _ in range(tokens)], "prompt_length": prompt,
             "loss_mask": [1] * completion, "logprobs": [round(-rng.random(), 4)] * completion,
             "finish_reason": "stop", "metadata": {"policy_versions": [number // 512]}}
    return json.dumps(head)[:-1] + ', "traces": [' + json.dumps(trace) + "]}"


def _long_session(tokenizer_dir: Path) -> Rollout:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    encode = lambda text: tokenizer.encode(text, add_special_tokens=False)  # noqa: E731
    ids = encode("<|im_start|>system\nYou operate a shell.<|im_end|>\n<|im_start|>user\nTidy /srv."
                 "<|im_end|>\n<|im_start|>assistant\n")
    prompt_length, mask, logprobs = len(ids), [], []
    for turn in range(TURNS):
        sampled = encode(f'<tool_call>\n{{"name": "sh", "arguments": {{"cmd": "ls /srv/{turn}"}}}}\n'
                         "</tool_call><|im_end|>")
        tool = encode(f"\n<|im_start|>user\n<tool_response>\nfile_{turn}.txt  notes_{turn}.md\n"
                      "</tool_response><|im_end|>\n<|im_start|>assistant\n")
        ids += sampled + tool
        mask += [1] * len(sampled) + [0] * len(tool)
        logprobs += [-0.3] * len(sampled) + [None] * len(tool)
    trace = Trace(tuple(ids), prompt_length, tuple(mask), tuple(logprobs), "stop",
                  {"policy_versions": [0], "turns": TURNS})
    return Rollout(run_id="bench", task="long_session", row_id="long", sample_index=0,
                   group_id="long", phase="post", step=None, session_id="session-long",
                   status=Status.COMPLETED, error=None, reward=1.0, rewards={"exact": 1.0},
                   success=True, result={"answer": "done"}, turns=TURNS,
                   usage=Usage(len(ids), sum(mask)), elapsed_s=7200.0, traces=(trace,))


def generate(run_dir: Path, rollouts: int, tokens: int) -> Rollout:
    from agentcore_rl_harness.models import prepare_model

    store = RunStore(run_dir)
    store.write_config({"model": {"name": "tiny"}})
    store.write_run_info({"mode": "run", "overrides": []})
    store.close()
    rng = random.Random(0)
    with open(run_dir / "rollouts.jsonl", "w", encoding="utf-8") as handle:
        for number in range(rollouts):
            handle.write(_record(number, tokens, rng) + "\n")
    Rollout.from_json(json.loads((run_dir / "rollouts.jsonl").open().readline()))  # well-formed
    long = _long_session(prepare_model("tiny"))
    with open(run_dir / "rollouts.jsonl", "a", encoding="utf-8") as handle:
        handle.write(encode_rollout(long)[1] + "\n")
    return long


def _timed(label: str, action, results: dict) -> object:
    """Wall time, and this process's CPU time (what the viewer costs on a busy machine)."""
    start, cpu = time.perf_counter(), time.process_time()
    value = action()
    results[label] = round(time.perf_counter() - start, 3)
    results[label + " cpu"] = round(time.process_time() - cpu, 3)
    print(f"{label:36s} {results[label]:8.3f} s wall {results[label + ' cpu']:8.3f} s cpu", flush=True)
    return value


def _rss_mib() -> float:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * resource.getpagesize() / 2**20


def in_process(run_dir: Path, rollouts: int, results: dict) -> None:
    from agentcore_rl_harness.viewer.index import Filter
    from agentcore_rl_harness.viewer.pages import rollout_page, run_page
    from agentcore_rl_harness.viewer.runs import Catalog

    rss_before = _rss_mib()
    run = Catalog([run_dir]).runs()[0]
    page = lambda query: run_page(run, query, start=0, limit=100, mode="server")  # noqa: E731
    _timed("open (index + first page)", lambda: page(Filter()), results)
    results["index_rss_mib"] = round(_rss_mib() - rss_before, 1)
    _timed("reopen", lambda: page(Filter()), results)
    failures = _timed("filter outcome=failure", lambda: page(Filter(outcome="failure")), results)
    results["failures_matched"] = int(re.search(r"(\d+) of \d+ match", failures).group(1))
    _timed("filter search 'wrong answer 42'", lambda: page(Filter(search="wrong answer 42")), results)
    _timed("filter task+phase+failure", lambda: page(Filter(task="task_3", phase="post",
                                                            outcome="failure")), results)
    store = RunStore(run_dir)
    store.append(Rollout.from_json(json.loads(_record(rollouts + 1, 256, random.Random(1)))))
    store.close()
    _timed("tail: refresh after 1 append", run.index.refresh, results)
    _timed("tail: refresh, nothing new", run.index.refresh, results)
    number = rollouts  # the 300-turn session
    _timed("300-turn rollout page (cold tok.)", lambda: rollout_page(
        run, number, tokenizer_dir=None, token_start=0, mode="server"), results)
    _timed("300-turn rollout page (warm)", lambda: rollout_page(
        run, number, tokenizer_dir=None, token_start=0, mode="server"), results)


def over_http(run_dir: Path, long_number: int, results: dict) -> None:
    process = subprocess.Popen([sys.executable, "-m", "agentcore_rl_harness.cli", "view",
                                str(run_dir), "--port", "0"], stdout=subprocess.PIPE, text=True)
    try:
        base = re.search(r"(http://\S+)", process.stdout.readline()).group(1)
        key = run_dir.name
        for label, path in (("http: run page (cold index)", f"run/{key}/index.html"),
                            ("http: run page (warm)", f"run/{key}/index.html"),
                            ("http: filter failures", f"run/{key}/index.html?outcome=failure"),
                            ("http: live poll rows.json", f"run/{key}/rows.json?after={long_number + 1}"),
                            ("http: 300-turn rollout page (cold)", f"run/{key}/rollout/{long_number}.html"),
                            ("http: 300-turn rollout page (warm)", f"run/{key}/rollout/{long_number}.html")):
            _timed(label, lambda: urllib.request.urlopen(base + path, timeout=600).read(), results)
    finally:
        process.terminate()
        process.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=50_000)
    parser.add_argument("--tokens", type=int, default=256, help="token ids per generated trace")
    parser.add_argument("--keep", type=Path, default=None, help="write the run dir here and keep it")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    parent = args.keep or Path(tempfile.mkdtemp(prefix="viewer-bench-"))
    run_dir = parent / "bench-run"
    results: dict = {"rollouts": args.rollouts + 1, "tokens_per_trace": args.tokens,
                     "load_average": os.getloadavg()[0], "cpus": os.cpu_count()}
    try:
        long = _timed("generate", lambda: generate(run_dir, args.rollouts, args.tokens), results)
        results["jsonl_mib"] = round((run_dir / "rollouts.jsonl").stat().st_size / 2**20, 1)
        results["long_session_tokens"] = len(long.traces[0].token_ids)
        in_process(run_dir, args.rollouts, results)
        over_http(run_dir, args.rollouts, results)
    finally:
        if args.keep is None:
            shutil.rmtree(parent, ignore_errors=True)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
