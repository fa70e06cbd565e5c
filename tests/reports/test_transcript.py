"""`reports/transcript.py`: a rollout's conversation decoded from its traces with the run's own
tokenizer, shown in report.html (escaped) and excerpted in report.md for failed rollouts."""

import json

from agentcore_rl_harness.records import Status, Trace
from agentcore_rl_harness.reports.build import build_report
from agentcore_rl_harness.reports.render import write_reports
from agentcore_rl_harness.reports.tokenizer import Tokenizer, run_tokenizer
from agentcore_rl_harness.reports.transcript import messages

from test_store import make_rollout

HOSTILE = '<script>x()</script>"onload=alert(1) x="</pre>'
PROMPT = (
    "<|im_start|>system\nYou are a shop assistant.<|im_end|>\n"
    f"<|im_start|>user\nWhat do 3 apples cost? {HOSTILE}<|im_end|>\n"
    '<|im_start|>assistant\n<tool_call>\n{"name": "price", "arguments": {"item": "apple"}}\n</tool_call><|im_end|>\n'
    "<|im_start|>user\n<tool_response>\n50\n</tool_response><|im_end|>\n"
    "<|im_start|>assistant\n"
)
REPLY = "The total is 150 cents.<|im_end|>"


def _trace(tokenizer):
    prompt = tokenizer.encode(PROMPT, add_special_tokens=False)
    reply = tokenizer.encode(REPLY, add_special_tokens=False)
    return Trace(token_ids=tuple(prompt + reply), prompt_length=len(prompt), loss_mask=(1,) * len(reply),
                 logprobs=(-0.1,) * len(reply), finish_reason="stop", metadata={})


def test_messages_tool_calls_and_results_come_back_from_the_tokens(tiny_model_dir, tiny_tokenizer):
    found = messages(_trace(tiny_tokenizer), Tokenizer(tiny_model_dir, ""))
    assert [(m.role, m.trained) for m in found] == [
        ("system", False), ("user", False), ("assistant", False), ("tool", False), ("assistant", True)]
    assert found[1].content == f"What do 3 apples cost? {HOSTILE}"
    assert [call.raw for call in found[2].tool_calls] == ['{"name": "price", "arguments": {"item": "apple"}}']
    assert (found[2].tool_calls[0].name, found[2].tool_calls[0].arguments) == ("price", '{"item": "apple"}')
    assert found[2].content == ""
    assert found[3].content == "50" and found[4].content == "The total is 150 cents."


def test_reports_show_the_transcript_with_the_runs_own_tokenizer(tmp_path, tiny_model_dir, tiny_tokenizer):
    rollouts = [make_rollout("r0", status=Status.TASK_FAILED, success=False, reward=0.5,
                             rewards={"correct": 0.0, "looked_up_price": 1.0},
                             error=f"AssertionError: expected 150, got None {HOSTILE}",
                             traces=(_trace(tiny_tokenizer),)),
                make_rollout("r1", rewards={"correct": 1.0, "looked_up_price": 1.0}, traces=())]
    report = build_report(run_id="run", mode="eval", config={"model": {"name": str(tiny_model_dir)}},
                          overrides=[], versions={}, git_sha=None, started_at="", wall_time_s=1.0,
                          rollouts=rollouts, item_phase="eval")
    assert run_tokenizer(report.run.config) == tiny_model_dir
    write_reports(tmp_path, report, rollouts)
    means = json.loads((tmp_path / "report.json").read_text())["overall"]["reward_means"]
    assert means["correct"]["value"] == 0.5 and means["correct"]["n"] == 2
    assert means["looked_up_price"]["value"] == 1.0 and means["correct"]["ci_low"] == 0.0
    page = (tmp_path / "report.html").read_text()
    assert "transcript:" in page and HOSTILE not in page  # escaped everywhere
    assert "What do 3 apples cost? &lt;script&gt;x()&lt;/script&gt;&#34;onload=alert(1) x=&#34;&lt;/pre&gt;" in page
    assert "tool call:" in page and "The total is 150 cents." in page and "(sampled)" in page
    assert "<td>correct</td><td>0.500 [0.000, 1.000]</td><td>2</td>" in page
    markdown = (tmp_path / "report.md").read_text()
    assert "| eval | t | correct | 0.500 [0.000, 1.000] | 2 |" in markdown
    assert "## Failed rollouts (1; first 1, full transcripts in report.html)" in markdown
    assert "`task_failed`, reward 0.500 (correct 0, looked_up_price 1) — AssertionError: expected 150" in markdown
    assert "  - tool: 50\n  - assistant: The total is 150 cents." in markdown
    assert "<script>" not in markdown and "  - system:" not in markdown


def test_without_the_runs_model_on_this_machine_the_page_says_how_to_decode(tmp_path):
    rollouts = [make_rollout("r0")]
    report = build_report(run_id="run", mode="eval", config={"model": {"name": str(tmp_path / "gone")}},
                          overrides=[], versions={}, git_sha=None, started_at="", wall_time_s=1.0,
                          rollouts=rollouts, item_phase="eval")
    write_reports(tmp_path, report, rollouts)
    assert "agentcore-rl report RUN_DIR --tokenizer DIR" in (tmp_path / "report.html").read_text()


def test_reasoning_and_a_tool_call_cut_at_max_tokens_are_kept_apart_from_the_text(tmp_path, tiny_model_dir,
                                                                                 tiny_tokenizer):
    prompt = tiny_tokenizer.encode("<|im_start|>user\nAdd 1 and 2.<|im_end|>\n<|im_start|>assistant\n",
                                   add_special_tokens=False)
    reply = tiny_tokenizer.encode('<think>use add</think>Adding.<tool_call>\n{"name": "add", "argu',
                                  add_special_tokens=False)
    trace = Trace(token_ids=tuple(prompt + reply), prompt_length=len(prompt), loss_mask=(1,) * len(reply),
                  logprobs=(-0.1,) * len(reply), finish_reason="length", metadata={})
    user, assistant = messages(trace, Tokenizer(tiny_model_dir, ""))
    assert (user.role, user.content, user.trained) == ("user", "Add 1 and 2.", False)
    assert (assistant.reasoning, assistant.content, assistant.trained) == ("use add", "Adding.", True)
    assert [(call.name, call.raw) for call in assistant.tool_calls] == [("(unparsed)", '{"name": "add", "argu')]
    rollouts = [make_rollout("r0", status=Status.TASK_FAILED, success=False, traces=(trace,))]
    report = build_report(run_id="run", mode="eval", config={"model": {"name": str(tiny_model_dir)}},
                          overrides=[], versions={}, git_sha=None, started_at="", wall_time_s=1.0,
                          rollouts=rollouts, item_phase="eval")
    write_reports(tmp_path, report, rollouts)
    page = (tmp_path / "report.html").read_text()
    assert "reasoning:</p><pre>use add</pre><pre>Adding.</pre>" in page
    assert '  - assistant: Adding. → {"name": "add", "argu' in (tmp_path / "report.md").read_text()
