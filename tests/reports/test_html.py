"""report.html: self-contained, every agent/dataset string escaped, the views a user needs."""

import json
import re
from html.parser import HTMLParser

from agentcore_rl_harness.records import Status, Trace
from agentcore_rl_harness.reports.build import build_report
from agentcore_rl_harness.reports.html import mask_runs, render_html

from test_store import make_rollout

PAYLOAD = '<script>alert(1)</script>"><img src=x onerror=alert(2)>'


class _Tags(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.attrs = [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attrs += [name for name, _ in attrs]


def hostile_rollouts():
    trace = Trace(token_ids=(1, 2, 3, 4, 5, 6, 7), prompt_length=3, loss_mask=(1, 1, 0, 1),
                  logprobs=(-0.1, -0.2, None, -0.3), finish_reason="stop",
                  metadata={"note": PAYLOAD})
    pre = [make_rollout(f"{PAYLOAD}{i}", phase="pre", task=PAYLOAD, success=False, reward=0.0,
                        status=Status.TASK_FAILED, error=PAYLOAD, result={"answer": PAYLOAD},
                        traces=(trace,), session_id=PAYLOAD) for i in range(3)]
    post = [make_rollout(f"{PAYLOAD}{i}", phase="post", task=PAYLOAD, reward=1.0 - 0.1 * i,
                         result={PAYLOAD: 1}, traces=(trace,)) for i in range(3)]
    return pre + post


def hostile_report(rollouts):
    return build_report(
        run_id=PAYLOAD, mode="run", config={"model": {"name": PAYLOAD}}, overrides=[PAYLOAD],
        versions={}, git_sha=None, started_at=PAYLOAD, wall_time_s=1.0, rollouts=rollouts,
        item_phase="post", tags={PAYLOAD: [PAYLOAD]},
        train_steps=[{"step": 0, "reward_mean": 0.2}, {"step": 1, "reward_mean": 0.7}])


def test_every_string_is_escaped_and_nothing_is_injected():
    rollouts = hostile_rollouts()
    page = render_html(hostile_report(rollouts), rollouts)
    parser = _Tags()
    parser.feed(page)
    assert parser.tags.count("script") == 1  # only the page's own script
    assert "img" not in parser.tags and "onerror" not in parser.attrs
    assert "&lt;script&gt;alert(1)&lt;/script&gt;&#34;&gt;&lt;img src=x onerror=alert(2)&gt;" in page


class _Places(HTMLParser):
    """Each text node with its enclosing tags, each attribute with its tag; entities decoded."""

    def __init__(self):
        super().__init__()
        self.stack, self.texts, self.attrs, self.tags = [], [], [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attrs += [(tag, name, value) for name, value in attrs]
        if tag != "meta":  # the only void element written without "/>"
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        self.tags.append(tag)
        self.attrs += [(tag, name, value) for name, value in attrs]

    def handle_endtag(self, tag):
        if tag in self.stack:
            del self.stack[len(self.stack) - 1 - self.stack[::-1].index(tag):]

    def handle_data(self, data):
        self.texts.append((tuple(self.stack), data))

    def inside(self, *tags):
        return [text for stack, text in self.texts if all(tag in stack for tag in tags)]


def test_a_hostile_task_error_and_result_are_escaped_wherever_they_appear():
    task = '<script>t()</script>"onload=alert(1) x="</td><td>task'
    error = '<script>e()</script>"onload=alert(2) x="</td></pre>error'
    answer = '<script>r()</script>"onload=alert(3) x="</td></pre>result'
    row_id = '"onload=alert(4) x="</td>row'
    rollouts = [make_rollout(row_id, task=task, phase="eval", success=False, reward=0.0,
                             status=Status.TASK_FAILED, error=error, result={"answer": answer},
                             traces=(), session_id="s")]
    report = build_report(
        run_id="run", mode="eval", config={}, overrides=[], versions={}, git_sha=None,
        started_at="now", wall_time_s=1.0, rollouts=rollouts, item_phase="eval",
        tags={task: ["x"]})
    page = render_html(report, rollouts)
    places = _Places()
    places.feed(page)

    # nothing got out of its text node or attribute value
    assert page.count("<script") == 1 and places.tags.count("script") == 1
    assert '"onload=' not in page and not [a for a in places.attrs if a[1].startswith("on")]
    assert page.count("</td>") == page.count("<td") and page.count("</pre>") == page.count("<pre")
    assert places.tags.count("td") == 9 * 3 + 13 + 5  # summary rows: task, tag:x, overall; one reward
    # ... and each value is shown, whole, in every place it appears
    cells = places.inside("table", "td")
    assert cells.count(task) == 3  # its rollout row, its summary row and its reward function's row
    title = f"{task} / {row_id} / sample 0 / eval — task_failed"
    assert places.inside("details", "summary").count(title) == 1
    assert any(text.startswith(f"{task} eval: ") for text in places.inside("svg", "rect", "title"))
    assert task[:24] in places.inside("svg", "text")
    assert places.inside("pre").count(error) == 1
    result_shown = json.dumps({"answer": answer}, indent=2, ensure_ascii=False)
    assert places.inside("pre").count(result_shown) == 1
    assert ("td", "data-v", row_id) in places.attrs and row_id in places.inside("td", "a")


def test_page_is_offline_and_has_the_plots_table_and_token_view():
    rollouts = hostile_rollouts()
    page = render_html(hostile_report(rollouts), rollouts)
    links = re.findall(r'<a class="viewer-link" href="(http://127\.0\.0\.1:7576/run/[^"<>]*)"', page)
    assert len(links) == len(rollouts)  # to `agentcore-rl view`, on loopback; nothing is fetched
    for link in links:
        page = page.replace(link, "")
    assert "http://" not in page.replace("http://www.w3.org/2000/svg", "")
    assert "https://" not in page and "Content-Security-Policy" in page
    assert page.count("<svg") == 3  # success pre vs post, reward per step, reward histogram
    assert "pre vs post" in page and "Training reward per step" in page
    assert page.count('<tr class="rollout') == 6 and 'class="sortable rollouts"' in page
    assert "runs: prompt 3 · trained 2 · masked 1 · trained 1" in page
    assert '<span class="run trained"' in page and '<span class="run masked"' in page


def test_mask_runs_split_prompt_trained_and_masked_tokens():
    trace = Trace(token_ids=tuple(range(8)), prompt_length=2, loss_mask=(1, 1, 0, 0, 1, 1),
                  logprobs=(-1.0, -1.0, None, None, -1.0, -1.0), finish_reason="stop")
    assert mask_runs(trace) == [("prompt", 0, 2), ("trained", 2, 4), ("masked", 4, 6),
                                ("trained", 6, 8)]
