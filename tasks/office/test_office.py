"""The office pack: OfficeBench-shaped tasks over mail, calendars, sheets and documents.

Each row seeds the session with files (.eml, .ics, .csv/.xlsx, .md) and asks for a change that
needs one, two or three apps (one task per level: `test_office_level1` .. `level3`). The agent
(`agent.py`, LangGraph) works on those files in its own sandbox; the test reads the session's
final files through the `sandbox` fixture and checks the end state (`office_checks.py`):
`rollout.reward` is the share of checks passed (0 when a guard fails), success is every check.
`agent=oracle` plays the row's `script` through the real agent. Level 1m is level 1's mail
forwarding with only its three tools offered: the pack's RL-lift level. The MCP level
(`test_office_mcp`) is level 1 with the tools served over MCP: a Strands agent (`mcp_agent.py`)
with Strands' own MCP client, against `office_mcp_server.py` started in each session's sandbox.
Regenerate the data with `python tasks/office/make_office.py`.
"""

import office_checks

import agentcore_rl_harness as arl


def payload(row):
    """What the agent gets: the instruction, the files to start from and, where the row names
    them, the tools it offers and its budget of model calls (level 1m)."""
    sent = {"task": row["task"], "files": row["files"], "tables": row["tables"]}
    for optional in ("tools", "max_model_calls"):
        if row.get(optional):
            sent[optional] = row[optional]
    return sent


def oracle(row):
    """The row's reference solution as the assistant turns that do it (`_script`)."""
    return {"_script": row["script"]}


async def check_office(rollout, row, sandbox, *, success_only=False):
    """Partial credit per check (`rewards["checks"]`); `success_only`: the reward RL trains on
    is 1 for success and 0 otherwise (the partial credit is still recorded)."""
    result = office_checks.score(row, await office_checks.read_state(sandbox))
    rollout.rewards["checks"] = sum(result.checks.values()) / len(result.checks)
    rollout.rewards["guards"] = float(not result.guard_failures)
    rollout.reward = float(result.success) if success_only else result.reward
    failed = [name for name, passed in result.checks.items() if not passed]
    assert result.success, f"failed checks {failed}, guards {result.guard_failures}"


def office_task(level, success_only=False):
    @arl.task(dataset=f"data/office-l{level}.jsonl", agent="agent.py", samples=4, payload=payload,
              oracle=oracle, tags=["office", f"level{level}"], name=f"test_office_level{level}")
    async def test(rollout, row, sandbox):
        await check_office(rollout, row, sandbox, success_only=success_only)

    return test


test_office_level1 = office_task(1)
test_office_level2 = office_task(2)
test_office_level3 = office_task(3)
# Level 1m, the RL-lift level: level 1's mail forwarding with only its three tools offered
# (`tasks/office/configs/lift.yaml`; tasks/office/README.md: "An RL lift on a multi-step task").
# Its reward is success alone: with partial credit, GRPO climbed the easy half (the right
# recipient, 0.5) while success fell (tasks/office/README.md: run G).
test_office_level1m = office_task("1m", success_only=True)

# The MCP level: level 1's rows, the tools served by an MCP server the harness starts inside each
# session (streamable HTTP on the session's own loopback), the agent Strands with its MCP client.
OFFICE_MCP = arl.McpServer(name="office", transport="http", command=(
    "{python}", "{task_dir}/office_mcp_server.py", "--http", "--port", "{port}"))


@arl.task(dataset="data/office-l1.jsonl", agent="mcp_agent.py", samples=4, payload=payload, oracle=oracle,
          tags=["office", "level1", "mcp"], mcp_servers=[OFFICE_MCP])
async def test_office_mcp(rollout, row, sandbox):
    await check_office(rollout, row, sandbox)
