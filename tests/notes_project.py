"""A small end-state task project for the teacher-forcing, warm-up and rescore tests: the agent
(plain openai SDK, a real BedrockAgentCoreApp) writes a note into its session's files with a
tool; the reward reads the note back from the session's final files (the `sandbox` fixture)."""

from __future__ import annotations

import json
from pathlib import Path

AGENT = '''
import json
import os

from bedrock_agentcore import BedrockAgentCoreApp
from openai import OpenAI

app = BedrockAgentCoreApp()
TOOLS = [{"type": "function", "function": {
    "name": "write_note", "description": "Write text to a file",
    "parameters": {"type": "object", "properties": {
        "path": {"type": "string"}, "text": {"type": "string"}}, "required": ["path", "text"]}}}]


def write_note(arguments):
    try:
        args = json.loads(arguments)
        path = os.path.normpath(args["path"])
        if path.startswith(("..", "/")):
            return "error: stay inside the working directory"
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(path, "w") as note:
            note.write(args["text"])
        return "written"
    except (ValueError, KeyError, TypeError, OSError) as exc:
        return f"error: {exc}"


@app.entrypoint
def invoke(payload):
    rollout = payload["_rollout"]
    client = OpenAI(base_url=rollout["base_url"], api_key=rollout["api_key"])
    messages = [{"role": "system", "content": "Write the note the user asks for with write_note."},
                {"role": "user", "content": payload["prompt"]}]
    for _ in range(3):
        reply = client.chat.completions.create(model=rollout["model_id"], messages=messages, tools=TOOLS,
                                               max_tokens=48)
        message = reply.choices[0].message
        if not message.tool_calls:
            return {"reply": message.content or ""}
        messages.append({"role": "assistant", "content": message.content, "tool_calls": [
            {"id": c.id, "type": "function", "function": {"name": c.function.name, "arguments": c.function.arguments}}
            for c in message.tool_calls]})
        for call in message.tool_calls:
            result = write_note(call.function.arguments) if call.function.name == "write_note" else "error: unknown tool"
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    return {"reply": ""}
'''

TASKS = '''
import agentcore_rl_harness as arl


def oracle(row):
    return {"_script": [
        {"tool_calls": [{"name": "write_note", "arguments": {"path": row["path"], "text": row["text"]}}]},
        {"content": "Done."},
    ]}


@arl.task(dataset="notes.jsonl", agent="notes_agent.py", samples=1, oracle=oracle,
          payload=lambda row: {"prompt": f"Write {row['text']!r} to {row['path']}."})
def test_note(rollout, row, sandbox):
    found = sandbox.sync.exec(["cat", row["path"]])
    rollout.reward = float(found.ok and found.stdout == row["text"])
    assert rollout.reward == 1.0, f"{row['path']} holds {found.stdout!r}"
'''


def rows(train: int = 4, test: int = 2) -> list[dict]:
    made = []
    for index in range(train + test):
        made.append({"id": f"n{index}", "split": "train" if index < train else "test",
                     "path": f"notes/n{index}.txt", "text": f"note number {index}"})
    return made


def write(root: Path, *, train: int = 4, test: int = 2, tasks: str = TASKS) -> Path:
    root.joinpath("notes.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows(train, test)))
    root.joinpath("notes_agent.py").write_text(AGENT)
    root.joinpath("test_notes.py").write_text(tasks)
    return root
