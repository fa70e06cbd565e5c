"""The supervised warm-up step of the local trainer (`trainers/sft.py`, `LocalTrainer.sft_step`)
on the tiny model: the loss on the demonstrations falls, and only masked tokens train."""

import pytest
import torch

from agentcore_rl_harness.errors import ConfigError
from agentcore_rl_harness.models import load_model
from agentcore_rl_harness.records import Trace
from agentcore_rl_harness.trainers import LocalTrainer, LocalTrainerConfig
from agentcore_rl_harness.trainers.sft import mean_nll, require_sft


def demo(prompt, reply, mask=None):
    mask = mask or (1,) * len(reply)
    return Trace(token_ids=(*prompt, *reply), prompt_length=len(prompt), loss_mask=tuple(mask),
                 logprobs=tuple(0.0 if m else None for m in mask), finish_reason="stop")


@pytest.fixture
def trainer(tiny_model_dir):
    return LocalTrainer(load_model(tiny_model_dir), config=LocalTrainerConfig(lr=1e-2, finetune="full"))


def test_supervised_steps_lower_the_loss_on_the_demonstrations(trainer):
    demos = [demo([11, 12, 13, 14], [200, 201, 202, 2]), demo([21, 22, 23], [300, 301, 2])]
    before = trainer.sft_loss(demos)
    metrics = [trainer.sft_step(demos) for _ in range(8)]
    after = trainer.sft_loss(demos)
    assert after < before - 3.0
    assert metrics[0].loss == pytest.approx(before, rel=1e-4)  # the step reports its loss before the update
    assert [m.step for m in metrics] == list(range(1, 9)) and metrics[-1].policy_version == 8
    assert all(m.trained_tokens == 7 and m.sequences == 2 for m in metrics)


def test_only_masked_tokens_are_trained(trainer, tiny_model_dir):
    # The same tokens; in `hidden` only the last one is trained, which is all `last_only` has.
    hidden = demo([5, 6, 7], [300, 301], mask=(0, 1))
    last_only = demo([5, 6, 7, 300], [301])
    twin = LocalTrainer(load_model(tiny_model_dir), config=LocalTrainerConfig(lr=1e-2, finetune="full"))
    assert trainer.sft_step([hidden]).trained_tokens == twin.sft_step([last_only]).trained_tokens == 1
    for (name, a), b in zip(trainer.model.named_parameters(), twin.model.parameters()):
        assert torch.allclose(a, b, atol=1e-6), name
    taught = demo([5, 6, 7], [300, 301], mask=(1, 0))
    before = twin.sft_loss([taught])
    twin.sft_step([taught])
    assert twin.sft_loss([taught]) < before  # the other mask trains the other token


def test_the_step_uses_warmup_lr_and_leaves_trainer_lr_alone(trainer):
    metrics = trainer.sft_step([demo([1, 2], [3, 2])], lr=1e-6)
    assert metrics.lr == 1e-6 and trainer.optimizer.param_groups[0]["lr"] == 1e-2
    assert trainer.sft_step([demo([1, 2], [3, 2])]).lr == 1e-2  # default: trainer.lr


def test_the_warm_up_has_its_own_optimizer_so_rl_starts_without_its_moments(trainer):
    demos = [demo([11, 12, 13], [200, 201, 2])]
    for _ in range(3):
        trainer.sft_step(demos)
    assert trainer.optimizer.state == {}, "the warm-up's Adam moments reached RL's optimizer"
    moments = [state["exp_avg"] for state in trainer._sft_optimizer.state.values()]
    assert moments and any(float(m.abs().sum()) > 0 for m in moments)


def test_demonstrations_without_trained_tokens_are_refused(trainer):
    with pytest.raises(ValueError, match="no trained tokens in the demonstrations"):
        trainer.sft_step([demo([1, 2], [3, 2], mask=(0, 0))])
    with pytest.raises(ValueError, match="no trained tokens"):
        mean_nll([(None, None)])


def test_a_trainer_without_a_supervised_step_is_refused_by_name():
    with pytest.raises(ConfigError, match="trainer=tinker has none yet"):
        require_sft("tinker")


def test_a_trainer_without_its_own_supervised_step_refuses_by_default():
    from agentcore_rl_harness.trainers.base import Trainer

    class RLOnly(Trainer):
        policy_version = 0

    with pytest.raises(ConfigError, match="RLOnly has no supervised warm-up step"):
        RLOnly().sft_step([])


def test_the_loss_is_the_mean_token_nll(trainer):
    demos = [demo([11, 12, 13], [200, 201, 2])]
    with torch.no_grad():
        logits = trainer.policy_model(input_ids=torch.tensor([demos[0].token_ids])).logits[0]
    logprobs = torch.log_softmax(logits.float(), -1)
    expected = -sum(float(logprobs[p - 1, demos[0].token_ids[p]]) for p in range(3, 6)) / 3
    assert trainer.sft_loss(demos) == pytest.approx(expected, rel=1e-4)
