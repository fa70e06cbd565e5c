import json

import pytest

import agentcore_rl_harness as arl
from agentcore_rl_harness.errors import DatasetError
from agentcore_rl_harness.tasks import build_payload, case_id, load_rows, task_spec


def _write_jsonl(path, rows):
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")


def _spec(tmp_path, dataset="data.jsonl", **kwargs):
    def test_something(rollout, row):
        pass

    # the decorator resolves paths against the defining file; point it at tmp_path
    spec = task_spec(arl.task(dataset=dataset, **kwargs)(test_something))
    return type(spec)(**{**spec.__dict__, "base_dir": tmp_path})


def test_rows_are_split_and_keep_ids(tmp_path):
    _write_jsonl(
        tmp_path / "data.jsonl",
        [{"id": "a", "split": "train", "q": 1}, {"id": 7, "split": "test", "q": 2}],
    )
    spec = _spec(tmp_path)
    assert [r["id"] for r in load_rows(spec, "train")] == ["a"]
    test_rows = load_rows(spec, "test")
    assert test_rows == [{"id": "7", "split": "test", "q": 2}]


def test_missing_ids_are_derived_from_position(tmp_path):
    _write_jsonl(tmp_path / "data.jsonl", [{"split": "test"}, {"split": "test"}])
    assert [r["id"] for r in load_rows(_spec(tmp_path), "test")] == ["row-0", "row-1"]


def test_csv_and_named_splits(tmp_path):
    (tmp_path / "d.csv").write_text("id,split,x\nr1,dev,1\nr2,fit,2\n")
    spec = _spec(tmp_path, dataset="d.csv", splits={"train": "fit", "test": "dev"})
    assert [r["id"] for r in load_rows(spec, "test")] == ["r1"]
    assert [r["id"] for r in load_rows(spec, "train")] == ["r2"]


def test_rows_without_split_are_a_clear_error(tmp_path):
    _write_jsonl(tmp_path / "data.jsonl", [{"id": 1}])
    with pytest.raises(DatasetError, match="no `split` field"):
        load_rows(_spec(tmp_path), "test")


def test_missing_file_and_bad_format_and_duplicates(tmp_path):
    with pytest.raises(DatasetError, match="does not exist"):
        load_rows(_spec(tmp_path, dataset="nope.jsonl"), "test")
    (tmp_path / "d.txt").write_text("x")
    with pytest.raises(DatasetError, match="unsupported dataset format"):
        load_rows(_spec(tmp_path, dataset="d.txt"), "test")
    _write_jsonl(tmp_path / "data.jsonl", [{"id": 1, "split": "test"}, {"id": 1, "split": "test"}])
    with pytest.raises(DatasetError, match="duplicate row id"):
        load_rows(_spec(tmp_path), "test")


def test_payload_sources_and_reserved_key(tmp_path):
    info = {"base_url": "http://127.0.0.1:1/v1"}
    spec = _spec(tmp_path)
    assert build_payload(spec, {"id": "1", "q": 2}, info) == {"id": "1", "q": 2, "_rollout": info}
    assert build_payload(spec, {"id": "1", "payload": {"p": 1}}, info) == {"p": 1, "_rollout": info}
    custom = _spec(tmp_path, payload=lambda row: {"prompt": row["q"]})
    assert build_payload(custom, {"id": "1", "q": "hi"}, info) == {"prompt": "hi", "_rollout": info}
    with pytest.raises(DatasetError, match="reserved key"):
        build_payload(spec, {"id": "1", "_rollout": 1}, info)
    listy = _spec(tmp_path, payload=lambda row: [1])
    with pytest.raises(DatasetError, match="must be a JSON object"):
        build_payload(listy, {"id": "1"}, info)


def test_a_payload_json_cannot_encode_is_a_dataset_error(tmp_path):
    info = {"base_url": "http://127.0.0.1:1/v1"}

    def circular(row):
        body = {"q": row["q"]}
        body["self"] = body
        return body

    for payload, what in ((lambda row: {"when": object()}, "object"), (circular, "Circular reference")):
        with pytest.raises(DatasetError, match=f"row '1' is not JSON-serialisable: .*{what}"):
            build_payload(_spec(tmp_path, payload=payload), {"id": "1", "q": 2}, info)


def test_reward_decorator_forms():
    @arl.reward
    def plain(rollout, row):
        return 1.0

    @arl.reward(weight=0.5, name="half")
    def weighted(rollout, row):
        return 2.0

    assert (plain.name, plain.weight, plain(None, {})) == ("plain", 1.0, 1.0)
    assert (weighted.name, weighted.weight, weighted(None, {})) == ("half", 0.5, 2.0)


def test_task_validates_samples():
    with pytest.raises(ValueError, match="samples must be an integer >= 1"):
        arl.task(dataset="x.jsonl", samples=0)


def test_case_ids_are_readable():
    assert case_id("17", 0) == "row-17-s0"
    assert case_id("arith-003", 2) == "arith-003-s2"


@pytest.mark.parametrize("name,text", [
    ("data.jsonl", ""), ("data.jsonl", "\n \n"), ("data.csv", "id,split,x\n"), ("data.json", "[]"),
])
def test_an_empty_dataset_says_it_has_no_rows_and_how_to_fix_it(tmp_path, name, text):
    (tmp_path / name).write_text(text)
    with pytest.raises(DatasetError) as excinfo:
        load_rows(_spec(tmp_path, dataset=name), "test")
    message = str(excinfo.value)
    assert f"{tmp_path / name} has no rows" in message
    assert "@task(dataset=...)" in message


def test_oracle_is_a_row_field_or_a_callable(tmp_path):
    from agentcore_rl_harness.tasks import oracle_result

    row = {"id": "q1", "answer": 4, "steps": ["2 + 2"]}
    assert oracle_result(_spec(tmp_path, oracle="answer"), row) == {"answer": 4}
    by_function = _spec(tmp_path, oracle=lambda r: {"answer": r["answer"], "work": r["steps"][0]})
    assert oracle_result(by_function, row) == {"answer": 4, "work": "2 + 2"}
    with pytest.raises(DatasetError, match=r"oracle='solution' names a row field, but row 'q1' has none"):
        oracle_result(_spec(tmp_path, oracle="solution"), row)
    with pytest.raises(DatasetError, match="must return a dict"):
        oracle_result(_spec(tmp_path, oracle=lambda r: r["answer"]), row)
    with pytest.raises(DatasetError, match=r"declares no oracle.*oracle=\"answer\""):
        oracle_result(_spec(tmp_path), row)
    for bad in ("", 3):
        with pytest.raises(ValueError, match="give a row field name"):
            arl.task(dataset="d.jsonl", oracle=bad)


def test_write_level_files_writes_each_levels_rows_in_order_with_their_own_key_order(tmp_path):
    """Keys stay in the order the generator built them: a script's tool-call arguments in the
    tool's order are what its demonstrations teach (sorted keys had reordered them)."""
    from agentcore_rl_harness.tasks import write_level_files

    rows = [{"level": 1, "id": "b", "args": {"to": "x", "body": "y"}}, {"id": "c", "level": 2}, {"level": 1, "id": "a"}]
    paths = write_level_files(rows, [1, 2, 3], lambda level: tmp_path / f"l{level}.jsonl")
    assert paths == [tmp_path / "l1.jsonl", tmp_path / "l2.jsonl", tmp_path / "l3.jsonl"]
    assert (tmp_path / "l1.jsonl").read_bytes() == (
        b'{"level": 1, "id": "b", "args": {"to": "x", "body": "y"}}\n{"level": 1, "id": "a"}\n')
    assert (tmp_path / "l2.jsonl").read_text() == '{"id": "c", "level": 2}\n'
    assert (tmp_path / "l3.jsonl").read_text() == ""  # a declared level without rows
