"""`judges/protocol.py`: the judge's answer is read strictly; no score is guessed from free text."""

import pytest

from agentcore_rl_harness.judges.protocol import Malformed, group_messages, parse_group, parse_pointwise


def test_a_pointwise_answer_is_one_json_object_fenced_or_not():
    assert parse_pointwise('{"score": 0.5, "reason": "half"}').score == 0.5
    assert parse_pointwise('```json\n{"score": 1}\n```').score == 1.0


@pytest.mark.parametrize("answer, problem", [
    ("", "empty"),
    ("Score: 1", "not one JSON object"),
    ('The answer is {"score": 1}', "not one JSON object"),
    ("[1]", "not an object"),
    ('{"grade": 1}', 'no "score"'),
    ('{"score": "1"}', "not a number"),
    ('{"score": true}', "not a number"),
    ('{"score": 7}', "outside 0..1"),
    ('{"score": NaN}', "not a number"),
])
def test_a_malformed_pointwise_answer_says_what_is_wrong(answer, problem):
    with pytest.raises(Malformed, match=problem):
        parse_pointwise(answer)


def test_a_group_answer_needs_every_attempt_once():
    verdicts = parse_group('{"scores": [{"id": 2, "score": 0.1}, {"id": 1, "score": 0.9, "reason": "best"}]}', 2)
    assert [(v.score, v.reason) for v in verdicts] == [(0.9, "best"), (0.1, "")]
    for answer, problem in [('{"scores": [{"id": 1, "score": 1}]}', r"attempt\(s\) \[2\] have no score"),
                            ('{"scores": [{"id": 1, "score": 1}, {"id": 1, "score": 0}]}', "repeated"),
                            ('{"scores": [{"id": 3, "score": 1}]}', "not one of 1..2"),
                            ('{"scores": [{"score": 1}]}', 'integer "id"'),
                            ('{"score": 1}', 'no "scores" list')]:
        with pytest.raises(Malformed, match=problem):
            parse_group(answer, 2)


def test_a_group_question_numbers_the_attempts():
    messages = group_messages("be right", ["a", "b", "c"])
    assert "3 attempts" in messages[0]["content"]
    assert "=== Attempt 3 ===\nc" in messages[1]["content"] and messages[1]["content"].startswith("Rubric:\nbe right")
