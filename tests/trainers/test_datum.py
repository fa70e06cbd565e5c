"""`datum.token_datum`: a completion-masked BatchItem -> the input/target layout adapters ship."""

import pytest

from agentcore_rl_harness.trainers.datum import token_data, token_datum
from agentcore_rl_harness.trainers.grpo import BatchItem


def item(token_ids, prompt_length, loss_mask, logprobs, advantage=2.0):
    return BatchItem("g", "r", tuple(token_ids), prompt_length, tuple(loss_mask), tuple(logprobs), advantage, None)


def test_the_docstring_example():
    # prompt t0 t1; then t2 (tool output, not trained), t3 t4 sampled, t5 not trained.
    datum = token_datum(item([10, 11, 12, 13, 14, 15], 2, [0, 1, 1, 0], [0.0, -0.5, -0.25, 0.0]))
    assert datum.input_tokens == (10, 11, 12, 13, 14)
    assert datum.target_tokens == (11, 12, 13, 14, 15)
    assert datum.mask == (0.0, 0.0, 1.0, 1.0, 0.0)
    assert datum.logprobs == (0.0, 0.0, -0.5, -0.25, 0.0)
    assert datum.advantages == (0.0, 0.0, 2.0, 2.0, 0.0)
    assert datum.trained_tokens == 2


def test_every_trained_target_is_a_sampled_token_with_its_logprob():
    token_ids = list(range(100, 120))
    loss_mask = [1, 1, 0, 0, 1, 1, 1, 0, 1, 0, 0, 1, 1, 1, 0]
    logprobs = [-(i + 1) / 10 if m else 0.0 for i, m in enumerate(loss_mask)]
    datum = token_datum(item(token_ids, 5, loss_mask, logprobs))
    trained = [(t, lp) for t, m, lp in zip(datum.target_tokens, datum.mask, datum.logprobs) if m]
    expected = [(token_ids[5 + i], logprobs[i]) for i, m in enumerate(loss_mask) if m]
    assert trained == expected
    assert all(len(seq) == len(datum.input_tokens) for seq in (datum.target_tokens, datum.mask, datum.logprobs, datum.advantages))


@pytest.mark.parametrize(
    "args",
    [
        ([1, 2, 3], 0, [1, 1, 1], [0.0, 0.0, 0.0]),  # no prompt: the first token has no context
        ([1, 2, 3], 1, [1, 1, 1], [0.0, 0.0, 0.0]),  # a whole-sequence mask, not the completion's
        ([1, 2, 3], 1, [1, 1], [0.0]),  # logprobs too short
    ],
)
def test_inconsistent_items_are_rejected_with_the_lengths(args):
    with pytest.raises(ValueError, match="prompt_length"):
        token_datum(item(*args))


def test_token_data_keeps_order():
    items = [item([1, 2, 3], 2, [1], [-0.1], advantage=a) for a in (1.0, -1.0)]
    assert [d.advantage for d in token_data(items)] == [1.0, -1.0]
