"""The migration pack's oracle: a `_script` of assistant turns that does the migration for real.

Played through the task's own agent (teacher forcing: each model call is answered with the next
turn), it reads each file to migrate, writes the reference migration, runs the tests and
answers, so the files it leaves pass every check; the same conversation is a demonstration for
a supervised warm-up. Turns are assistant messages in OpenAI chat shape:
`{"tool_calls": [{"name", "arguments"}]}` or `{"content": str}`.
"""

from __future__ import annotations

from migration_templates import KINDS


def reference_script(row: dict, *, test_command: str, done: str) -> dict:
    """The oracle of any migration level: read each class to migrate, write its reference
    migration, run the project's tests with `test_command`, answer with `done`."""
    turns: list[dict] = []
    for target in row["targets"]:
        path = target["path"]
        turns.append({"tool_calls": [{"name": "read_file", "arguments": {"path": path}}]})
        turns.append({"tool_calls": [{"name": "write_file",
                                      "arguments": {"path": path, "content": row["migrated"][path]}}]})
    turns.append({"tool_calls": [{"name": "run", "arguments": {"command": test_command}}]})
    turns.append({"content": f"Migrated {done}. `{test_command}` passes."})
    return {"_script": turns, "changed_files": [t["path"] for t in row["targets"]]}


def oracle_script(row: dict) -> dict:
    done = "; ".join(f"{t['path']}: {KINDS[t['kind']].hint}" for t in row["targets"])
    return reference_script(row, test_command="python -m unittest", done=done)
