"""The code-migration pack: small generated Python projects that use deprecated APIs, one task per
level (the number of files to migrate). See tasks/migration/README.md.

`test_migration_java` is the Java level (Java 8 -> 17 APIs, `java_projects.py`), run in its own
environment (`environments/java.yaml`: Debian's JDK 17 and JUnit 4; build it once with
`agentcore-rl env build tasks/migration/environments/java.yaml`).

The agent (`agent.py`, Strands Agents) lays the row's project out in its session, migrates it
with file and shell tools, and the rewards (`migration_rewards.py`) run the project's own tests
in the session's sandbox and check by AST that the deprecated uses are gone. Regenerate the rows
with `python tasks/migration/make_data.py`.
"""

import agentcore_rl_harness as arl
from java_rewards import java_files_migrated, java_oracle_script, java_tests_pass
from migration_rewards import evaluated, files_migrated, tests_pass
from migration_script import oracle_script


def payload(row):
    """What the agent gets: the project and the instruction (never the reference migration)."""
    return {"instruction": row["instruction"], "files": row["files"]}


def java_payload(row):
    return {**payload(row), "language": "java"}


def check(rollout, row):
    checked = evaluated(rollout)
    problems = checked.problems() if checked else ["not evaluated"]
    assert rollout.reward == 1.0, f"reward {rollout.reward}: " + "; ".join(problems)[:2000]


TASK = dict(agent="agent.py", samples=1, rewards=[files_migrated, tests_pass], payload=payload,
            oracle=oracle_script, sandbox=True)


@arl.task(dataset="data/level1.jsonl", tags=["migration", "level1"], **TASK)
def test_migration_level1(rollout, row):
    check(rollout, row)


@arl.task(dataset="data/level2.jsonl", tags=["migration", "level2"], **TASK)
def test_migration_level2(rollout, row):
    check(rollout, row)


@arl.task(dataset="data/level3.jsonl", tags=["migration", "level3"], **TASK)
def test_migration_level3(rollout, row):
    check(rollout, row)


@arl.task(dataset="data/java.jsonl", tags=["migration", "java"], agent="agent.py", samples=1,
          rewards=[java_files_migrated, java_tests_pass], payload=java_payload, oracle=java_oracle_script,
          sandbox=True, environment="environments/java.yaml")
def test_migration_java(rollout, row):
    """Java 8 -> 17 in the Java environment (Debian's JDK 17 and JUnit 4; environments/java.yaml)."""
    check(rollout, row)
