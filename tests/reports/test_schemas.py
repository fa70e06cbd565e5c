"""report.json against its committed JSON Schema; junit.xml against Jenkins' strict JUnit XSD."""

import json
from pathlib import Path

import jsonschema
import pytest

from agentcore_rl_harness.records import Status
from agentcore_rl_harness.reports import model
from agentcore_rl_harness.reports.build import build_report
from agentcore_rl_harness.reports.render import render_junit, write_reports

from test_store import make_rollout

SCHEMA_FILE = Path(model.__file__).with_name("report.schema.json")
XSD = Path(__file__).with_name("junit-10.xsd")  # jenkinsci/xunit-plugin's strict schema
HOSTILE = '<script>alert(1)</script>"><img src=x onerror=alert(2)>\x07'


def _rollouts():
    pre = [make_rollout(f"r{i}", phase="pre", success=False, reward=0.0,
                        status=Status.TASK_FAILED, error=HOSTILE) for i in range(3)]
    post = [make_rollout(f"r{i}", phase="post") for i in range(3)]
    post.append(make_rollout("r9", phase="post", status=Status.INFRA_ERROR, success=None,
                             reward=None, error="boom"))
    return pre + post


def _report():
    return build_report(
        run_id="r", mode="run", config={"model": {"name": "tiny"}, "trainer": {"kind": "local"}},
        overrides=["model=tiny"], versions={"torch": "2"}, git_sha=None,
        started_at="2026-01-01T00:00:00+00:00", wall_time_s=2.0, rollouts=_rollouts(),
        item_phase="post", train_steps=[{"step": 0, "reward_mean": 0.5, "loss": 0.1}],
        tags={"t": ["math"]})


def test_committed_schema_file_is_the_generated_schema():
    assert SCHEMA_FILE.is_file(), "run: python -m agentcore_rl_harness.reports.model > " + str(SCHEMA_FILE)
    assert SCHEMA_FILE.read_text() == model.json_schema_text(), (
        "report.schema.json is stale; regenerate it with "
        "`python -m agentcore_rl_harness.reports.model > src/agentcore_rl_harness/reports/report.schema.json`"
    )


def test_report_json_validates_against_the_schema(tmp_path):
    write_reports(tmp_path, _report(), _rollouts())
    document = json.loads((tmp_path / "report.json").read_text())
    schema = json.loads(SCHEMA_FILE.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.validate(document, schema)
    assert document["schema_version"] == model.REPORT_SCHEMA_VERSION
    broken = dict(document, overall={**document["overall"], "success_rate": "high"})
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, schema)


def test_junit_validates_against_the_strict_jenkins_junit_xsd():
    xmlschema = pytest.importorskip("xmlschema", reason="pip install xmlschema")
    schema = xmlschema.XMLSchema(str(XSD))
    document = render_junit(_report(), _rollouts())
    schema.validate(document.decode())
    assert b"onerror" in document and b"<img" not in document  # escaped as text, control char dropped
    # the schema is strict where it matters: per-case <properties> (what pytest's xunit1 writes)
    # are refused, so the test above would catch them
    with_case_properties = document.replace(
        b"<system-out>", b'<properties><property name="a" value="b" /></properties><system-out>', 1)
    assert not schema.is_valid(with_case_properties.decode())
