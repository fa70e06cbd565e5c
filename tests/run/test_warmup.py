"""`run/warmup.py`: demonstrations come from train rows only, conversations render with the
mask on the assistant's tokens, and the supervised steps run on the real local trainer."""

import json

import pytest

from agentcore_rl_harness.config import WarmupConfig
from agentcore_rl_harness.errors import ConfigError, HarnessError
from agentcore_rl_harness.gateway.rendering import ChatTemplateRenderer, load_template, normalize_messages
from agentcore_rl_harness.records import Rollout, Status, Trace, Usage
from agentcore_rl_harness.run.warmup import (
    Demonstration, RowGuard, WarmUp, from_dataset, from_rollouts, from_run, render_conversation,
)

from run_fakes import make_spec

TOOLS = [{"type": "function", "function": {"name": "calculator", "parameters": {
    "type": "object", "properties": {"expression": {"type": "string"}}}}}]


def conversation(answer="19"):
    return [
        {"role": "system", "content": "Use the calculator."},
        {"role": "user", "content": "What is 12 + 7?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "calculator", "arguments": '{"expression": "12 + 7"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "19"},
        {"role": "assistant", "content": f"The answer is {answer}."},
    ]


@pytest.fixture(scope="module")
def renderer(tiny_model_dir):
    from agentcore_rl_harness.models import load_tokenizer

    return ChatTemplateRenderer(load_tokenizer(tiny_model_dir), chat_template=load_template())


def trace(n=3):
    return Trace(token_ids=tuple(range(10, 10 + 2 * n)), prompt_length=n, loss_mask=(1,) * n,
                 logprobs=(-0.5,) * n, finish_reason="stop")


def rollout(row_id, *, success=True, task="toy", traces=None):
    return Rollout(run_id="r", task=task, row_id=row_id, sample_index=0, group_id="g", phase="eval", step=None,
                   session_id="s", status=Status.COMPLETED if success else Status.TASK_FAILED, error=None,
                   reward=1.0 if success else 0.0, rewards={}, success=success, result={}, turns=1,
                   usage=Usage(), elapsed_s=0.1, traces=(trace(),) if traces is None else traces)


def test_a_conversation_renders_as_the_template_with_the_mask_on_assistant_tokens(renderer):
    messages = conversation()
    demo = render_conversation(renderer, messages, TOOLS)
    rendered = renderer.render(normalize_messages(messages), tools=TOOLS, add_generation_prompt=False)
    assert renderer.decode(demo.token_ids) == rendered.removesuffix("\n")
    assert renderer.decode(demo.token_ids[:demo.prompt_length]) == renderer.render(
        normalize_messages(messages[:2]), tools=TOOLS)
    trained = [t for t, m in zip(demo.token_ids[demo.prompt_length:], demo.loss_mask) if m]
    assert renderer.decode(trained) == (
        '<tool_call>\n{"name": "calculator", "arguments": {"expression": "12 + 7"}}\n</tool_call><|im_end|>'
        "The answer is 19.<|im_end|>")
    assert demo.metadata == {"demonstration": True, "forced_logprobs": "zero"}
    with pytest.raises(ValueError, match="no assistant message"):
        render_conversation(renderer, messages[:2])


def test_the_guard_keeps_train_rows_and_drops_evaluation_rows(tmp_path):
    spec = make_spec(tmp_path, train=3, test=2)  # r0..r2 train, r3, r4 test
    guard = RowGuard([spec], "test")
    demos = [Demonstration("toy", row, trace()) for row in ("r0", "r3", "r2", "r4", "nope")]
    demos.append(Demonstration("other", "r0", trace()))
    kept = guard.keep(demos)
    assert [d.row_id for d in kept.items] == ["r0", "r2"]
    assert kept.dropped == {"evaluation_row": 2, "not_a_train_row": 1, "task_not_in_run": 1}


def test_a_recorded_run_gives_its_successful_rollouts(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    records = [rollout("r0"), rollout("r1", success=False), rollout("r2", traces=())]
    (run_dir / "rollouts.jsonl").write_text("".join(json.dumps(r.to_json()) + "\n" for r in records))
    demos, dropped = from_run(run_dir)
    assert [d.row_id for d in demos] == ["r0"] and dropped == {"not_successful": 1, "no_trained_tokens": 1}
    with pytest.raises(ConfigError, match="rollouts.jsonl does not exist; name a run directory"):
        from_run(tmp_path / "missing")
    assert from_rollouts([]) == ([], {})


def test_a_conversation_dataset_names_train_rows(tmp_path, renderer):
    path = tmp_path / "demos.jsonl"
    lines = [{"row_id": "r0", "messages": conversation(), "tools": TOOLS},
             {"split": "train", "messages": conversation("20")},
             {"split": "test", "messages": conversation("21")},
             {"row_id": "r3", "messages": conversation("22")}]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    demos, dropped = from_dataset(path, renderer, "toy")
    assert [d.row_id for d in demos] == ["r0", None, "r3"] and dropped == {"evaluation_row": 1}
    spec = make_spec(tmp_path, train=3, test=2)
    kept = RowGuard([spec], "test").keep(demos, dropped)
    assert [d.row_id for d in kept.items] == ["r0", None] and kept.dropped == {"evaluation_row": 2}

    path.write_text(json.dumps({"messages": conversation()}) + "\n")
    with pytest.raises(ConfigError, match=r"line 1 names no 'row_id' \(a train row of task toy\) and no "):
        from_dataset(path, renderer, "toy")
    path.write_text("{not json\n")
    with pytest.raises(ConfigError, match="line 1 is not JSON"):
        from_dataset(path, renderer, "toy")
    with pytest.raises(ConfigError, match="no such file"):
        from_dataset(tmp_path / "nope.jsonl", renderer, "toy")


class Recording:
    """The real trainer, with a record of every trace its supervised steps received."""

    def __init__(self, trainer):
        self.trainer, self.seen = trainer, []

    def sft_step(self, traces, *, lr=None):
        self.seen += list(traces)
        return self.trainer.sft_step(traces, lr=lr)

    def sft_loss(self, traces):
        return self.trainer.sft_loss(traces)


def test_the_warm_up_trains_on_train_rows_only_and_lowers_their_loss(tmp_path, tiny_model_dir, renderer):
    from agentcore_rl_harness.models import load_model
    from agentcore_rl_harness.trainers import LocalTrainer, LocalTrainerConfig

    spec = make_spec(tmp_path, train=2, test=2)
    per_row = {f"r{i}": render_conversation(renderer, conversation(str(19 + i)), TOOLS) for i in range(4)}
    demos = RowGuard([spec], "test").keep([Demonstration("toy", row, t) for row, t in per_row.items()])
    trainer = Recording(LocalTrainer(load_model(tiny_model_dir), config=LocalTrainerConfig(lr=1e-2, finetune="full")))
    lines = []
    warm = WarmUp(WarmupConfig(enabled=True, steps=4, batch_size=2), trainer=trainer, trainer_kind="local",
                  train_dir=tmp_path / "train", write=lines.append, seed=0)
    summary = warm.run(demos, source="oracle")
    assert {id(t) for t in trainer.seen} == {id(per_row["r0"]), id(per_row["r1"])}  # never r2 / r3
    assert summary["loss_after"] < summary["loss_before"] - 1.0
    assert summary["demonstrations"] == [{"task": "toy", "row_id": "r0"}, {"task": "toy", "row_id": "r1"}]
    assert summary["dropped"] == {"evaluation_row": 2}
    assert json.loads((tmp_path / "train" / "warmup.json").read_text()) == summary
    steps = [json.loads(line) for line in (tmp_path / "train" / "warmup.jsonl").read_text().splitlines()]
    assert [s["step"] for s in steps] == [1, 2, 3, 4] and all(s["sequences"] == 2 for s in steps)
    assert "4 supervised steps on 2 demonstrations from train rows" in lines[-1]
    progress = [line for line in lines if line.startswith("agentcore-rl warm-up step ")]  # one per step, as it ends
    assert [line.split(":")[0] for line in progress] == [f"agentcore-rl warm-up step {i}/4" for i in (1, 2, 3, 4)]
    assert f"loss {steps[0]['loss']:.3f}, 2 sequences" in progress[0]

    only_test = RowGuard([spec], "test").keep([Demonstration("toy", "r3", per_row["r3"])])
    with pytest.raises(HarnessError, match=r"no demonstrations from train rows \(left out: \{'evaluation_row': 1\}\)"):
        warm.run(only_test, source="run:elsewhere")


def test_a_warm_up_on_a_trainer_without_a_supervised_step_is_refused_at_compose():
    from agentcore_rl_harness.config import compose_config

    with pytest.raises(ConfigError, match=r"warmup.enabled=true: trainer=tinker has no supervised warm-up step yet "
                                          r"\(trainers with one: \['local'\]\)"):
        compose_config(["model=tiny", "trainer=tinker", "warmup.enabled=true"])
    with pytest.raises(ConfigError, match=r"warmup.source='oracel'; valid choices"):
        compose_config(["model=tiny", "warmup.source=oracel"])
    with pytest.raises(ConfigError, match=r"warmup.steps=0 must be >= 1"):
        compose_config(["model=tiny", "warmup.steps=0"])
