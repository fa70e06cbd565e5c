"""Run directories for the viewer's tests, written through the harness's own store.

Traces are real token ids of the `tiny` model's tokenizer (SmolLM2's, ChatML): a prompt, a
sampled assistant turn with a tool call, the tool's result (mask 0), and a final sampled turn.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from agentcore_rl_harness.records import Rollout, Status, Trace, Usage
from agentcore_rl_harness.store import RunStore

HOSTILE = "<script>alert(1)</script>"
RUN_NAME = "20260101T000000Z-run"  # the run directory's name: its key in viewer URLs
TRACEBACK = ('Traceback (most recent call last):\n  File "tasks/test_arith.py", line 12, in '
             'test_arith\n    assert rollout.result["answer"] == row["answer"]\nAssertionError')


def chat_trace(tokenizer, question: str, answer: str, *, forced: bool = False) -> Trace:
    encode = lambda text: tokenizer.encode(text, add_special_tokens=False)  # noqa: E731
    prompt = encode(f"<|im_start|>system\nYou add numbers.<|im_end|>\n<|im_start|>user\n"
                    f"{question}<|im_end|>\n<|im_start|>assistant\n")
    call = encode('<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>'
                  "<|im_end|>")
    tool = encode("\n<|im_start|>user\n<tool_response>\n5\n</tool_response><|im_end|>\n"
                  "<|im_start|>assistant\n")
    final = encode(f"The answer is {answer}<|im_end|>")
    sampled = [-0.25 - 0.01 * index for index in range(len(call))]
    mask = [1] * len(call) + [0] * len(tool) + [1] * len(final)
    logprobs = [*sampled, *[None] * len(tool), *[-0.5] * len(final)]
    metadata = {"turns": 2, "tool_calls": 1, "policy_versions": [0]}
    if forced:
        metadata.update(teacher_forced=True, forced_logprobs="zero")
    return Trace(token_ids=tuple(prompt + call + tool + final), prompt_length=len(prompt),
                 loss_mask=tuple(mask), logprobs=tuple(logprobs), finish_reason="stop",
                 metadata=metadata)


def rollout(tokenizer, number: int, *, phase: str = "eval", success: bool = True,
            result: dict | None = None, row_id: str | None = None, sample_index: int = 0) -> Rollout:
    row_id = row_id or f"q{number}"
    answer = "5" if success else "7"
    trace = chat_trace(tokenizer, f"What is 2 + 3? (row {row_id})", answer, forced=phase == "demo")
    return Rollout(
        run_id="viewer-test", task="test_arith", row_id=row_id, sample_index=sample_index,
        group_id=f"test_arith/{row_id}", phase=phase, step=None, session_id=f"session-{number}",
        status=Status.COMPLETED if success else Status.TASK_FAILED,
        error=None if success else TRACEBACK, reward=1.0 if success else 0.0,
        rewards={"exact": 1.0 if success else 0.0, "format": 1.0}, success=success,
        result=result if result is not None else {"answer": answer}, turns=2,
        usage=Usage(prompt_tokens=trace.prompt_length, completion_tokens=sum(trace.loss_mask)),
        elapsed_s=1.5 + number, traces=(trace,))


def write_run(run_dir: Path, tokenizer, *, mode: str = "run", steps: int = 3) -> RunStore:
    """A `run`-mode directory: demo, pre and post rollouts (some failed), train steps, config.
    Returns the open store so a test can append more, as a running run does."""
    store = RunStore(run_dir)
    store.write_config({"model": {"name": "tiny"}, "trainer": {"kind": "local"}})
    store.write_run_info({"mode": mode, "overrides": ["model=tiny"]})
    store.append(rollout(tokenizer, 0, phase="demo"))
    for number, (phase, success) in enumerate(
            [("pre", False), ("pre", True), ("pre", False), ("post", True), ("post", True),
             ("post", False)], start=1):
        row = f"q{(number - 1) % 3}"
        result = {"answer": "x", "html": HOSTILE} if number == 3 else None
        store.append(rollout(tokenizer, number, phase=phase, success=success, result=result,
                             row_id=row))
    (run_dir / "train").mkdir(exist_ok=True)
    with open(run_dir / "train" / "steps.jsonl", "w") as handle:
        for step in range(steps):
            handle.write(json.dumps({"step": step + 1, "reward_mean": 0.3 + 0.2 * step,
                                     "loss": math.exp(-step)}) + "\n")
    return store
