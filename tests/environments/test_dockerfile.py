"""The Dockerfile that deploys an agent in a task's environment is generated from the same spec
the local runtime builds (the committed one for the Java level cannot drift from it)."""

from __future__ import annotations

from pathlib import Path

from agentcore_rl_harness.environments.cli import main
from agentcore_rl_harness.environments.dockerfile import render_dockerfile
from agentcore_rl_harness.environments.spec import load_spec

ROOT = Path(__file__).resolve().parents[2]
PACK = ROOT / "tasks" / "migration"


def test_the_java_levels_dockerfile_is_the_generated_one(monkeypatch):
    monkeypatch.chdir(ROOT)
    spec = load_spec(PACK / "environments" / "java.yaml")
    text = render_dockerfile(spec, agent=PACK / "agent.py", context=ROOT)
    assert (PACK / "java.Dockerfile").read_text() == text, (
        "regenerate: agentcore-rl env dockerfile tasks/migration/environments/java.yaml "
        "--agent tasks/migration/agent.py > tasks/migration/java.Dockerfile")
    assert "FROM --platform=linux/arm64 debian:bookworm-slim" in text
    assert "apt-get install -y --no-install-recommends python3 python3-pip ca-certificates default-jdk-headless junit4" in text
    assert "pip install --no-cache-dir --break-system-packages bedrock-agentcore==1.25.0 'strands-agents[openai]==1.62.0'" in text
    assert 'ENV JAVA_TOOL_OPTIONS="-Xmx256m' in text and "COPY tasks/migration/agent.py /app/agent.py" in text
    assert text.rstrip().endswith('CMD ["python3", "/app/agent.py"]') and "EXPOSE 8080" in text


def test_a_tarball_environment_starts_from_its_filesystem(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "rootfs.tar").write_bytes(b"")
    (tmp_path / "env.yaml").write_text("name: img\nrootfs: rootfs.tar\npip: [bedrock-agentcore]\n")
    (tmp_path / "agent.py").write_text("app = None\n")
    assert main(["dockerfile", "env.yaml", "--agent", "agent.py"]) == 0
    text = capsys.readouterr().out
    assert "FROM scratch\nADD rootfs.tar /\n" in text and "apt-get" not in text
    assert "pip install --no-cache-dir --break-system-packages bedrock-agentcore" in text


def test_a_missing_agent_file_is_named(tmp_path, capsys):
    (tmp_path / "env.yaml").write_text("name: e\ndebian: {packages: [junit4]}\n")
    assert main(["dockerfile", str(tmp_path / "env.yaml"), "--agent", str(tmp_path / "nope.py")]) == 2
    assert "--agent" in capsys.readouterr().err
