import subprocess
import sys

import agentcore_rl_harness


def test_public_names_are_pinned():
    assert sorted(agentcore_rl_harness.__all__) == [
        "ExecResult", "McpServer", "Rollout", "SampleResult", "SamplingParams", "Sandbox", "Status", "Trace",
        "judge_reward", "reward", "task",
    ]
    for name in agentcore_rl_harness.__all__:
        assert hasattr(agentcore_rl_harness, name)


def test_import_is_light():
    """`import agentcore_rl_harness` (and the plugin) must not pull torch, transformers or boto3."""
    code = (
        "import sys, agentcore_rl_harness, agentcore_rl_harness.plugin;"
        "print(sorted(m for m in ('torch', 'transformers', 'boto3', 'datasets') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
