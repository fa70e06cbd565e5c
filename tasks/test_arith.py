"""Two-digit arithmetic with a calculator tool: the bundled task.

The agent (`agents/calculator.py`) must call its calculator tool and then state the result; the
reward is 1 when the last integer of its final reply equals the answer. Regenerate the data with
`python tasks/data/make_arith.py`.
"""

import agentcore_rl_harness as arl


@arl.reward(weight=1.0)
def correct(rollout, row):
    return float(rollout.result.get("answer") == row["answer"])


def oracle(row):
    """The reference episode, played through the real agent under agent=oracle (teacher forcing):
    one calculator call, then the answer. The same conversation is the warm-up's demonstration."""
    expression = row["question"].removeprefix("What is ").rstrip("?")
    return {
        "answer": row["answer"],
        "_script": [
            {"tool_calls": [{"name": "calculator", "arguments": {"expression": expression}}]},
            {"content": f"The answer is {row['answer']}."},
        ],
    }


@arl.task(
    dataset="data/arith.jsonl",
    agent="../agents/calculator.py",
    samples=4,
    rewards=[correct],
    payload=lambda row: {"prompt": row["question"]},
    oracle=oracle,
)
def test_arith(rollout, row):
    assert rollout.reward == 1.0, f"expected {row['answer']}, got {rollout.result.get('answer')}"
