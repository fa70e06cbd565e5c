"""The code-migration agent: a Strands Agents agent served as a Bedrock AgentCore Runtime app.

It is written the way Strands users write agents: `strands.Agent` with the OpenAI model provider
(pointed at `payload["_rollout"]["base_url"]` with the session key as `api_key` during RL, the
agentcore-rl-toolkit convention) and four tools over the project it lays out in its own working
directory: list_files, read_file, write_file, run (a shell command). Nothing here knows about
training.

Strands' failure modes are the agent's outcome, reported in its result: a reply cut at
max_tokens (`MaxTokensReachedException`), a history over the model's context
(`ContextWindowOverflowException`) and the model-call budget all end the episode with what the
agent left in its files, which the task then scores. Other errors (the model server failing)
propagate, as they would for any user.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from bedrock_agentcore import BedrockAgentCoreApp
from strands import Agent, tool
from strands.agent.conversation_manager import NullConversationManager
from strands.hooks import BeforeModelCallEvent
from strands.models.openai import OpenAIModel
from strands.types.exceptions import ContextWindowOverflowException, MaxTokensReachedException

app = BedrockAgentCoreApp()

PROJECT_DIR = "project"
MAX_MODEL_CALLS = 16
MAX_TOKENS = 1024  # the session's own limit wins when lower (the gateway only lets an agent lower it)
MODEL_TIMEOUT_S = 3600  # a model call on a loaded CPU can take minutes; the rollout timeout bounds it
RUN_TIMEOUT_S = 60
MAX_OUTPUT_CHARS = 4000
MAX_READ_CHARS = 20000

SYSTEM_PROMPT = (
    "You are a Python maintenance engineer. You migrate code off deprecated APIs in the project "
    "in your working directory. Use the tools: list_files, read_file, write_file (the whole new "
    "file), run (a shell command, e.g. `python -m unittest`). Read a file before you rewrite it, "
    "keep its behaviour and public functions, never edit tests, and run the tests before you "
    "answer."
)
SYSTEM_PROMPTS = {  # by the payload's `language`
    "python": SYSTEM_PROMPT,
    "java": SYSTEM_PROMPT.replace("a Python maintenance", "a Java maintenance")
    .replace("`python -m unittest`", "`sh run_tests.sh`").replace("public functions", "public methods"),
}


class Workspace:
    """The project directory the tools act on; paths may not leave it."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()

    def path(self, relative: str) -> Path:
        target = (self.root / relative).resolve()
        if not target.is_relative_to(self.root):
            raise ValueError(f"{relative!r} is outside the project; use a path like 'cli.py'")
        return target

    def lay_out(self, files: dict[str, str]) -> None:
        for relative, text in files.items():
            target = self.path(relative)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")

    def listing(self) -> list[str]:
        return sorted(str(p.relative_to(self.root)) for p in self.root.rglob("*")
                      if p.is_file() and "__pycache__" not in p.parts)


def make_tools(workspace: Workspace) -> list:
    @tool
    def list_files() -> str:
        """List the project's files."""
        return "\n".join(workspace.listing())

    @tool
    def read_file(path: str) -> str:
        """Read a project file.

        Args:
            path: the file, relative to the project, e.g. "cli.py"
        """
        try:
            return workspace.path(path).read_text(encoding="utf-8")[:MAX_READ_CHARS]
        except (OSError, ValueError, UnicodeDecodeError) as exc:
            return f"error: {exc}"

    @tool
    def write_file(path: str, content: str) -> str:
        """Replace a project file with new content (the whole file).

        Args:
            path: the file, relative to the project, e.g. "cli.py"
            content: the file's complete new text
        """
        try:
            target = workspace.path(path)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(content, encoding="utf-8")
        except (OSError, ValueError) as exc:
            return f"error: {exc}"
        return f"wrote {len(content)} characters to {path}"

    @tool
    def run(command: str) -> str:
        """Run a shell command in the project directory, e.g. "python -m unittest".

        Args:
            command: the shell command
        """
        env = {**os.environ, "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")}
        try:
            done = subprocess.run(command, shell=True, cwd=workspace.root, capture_output=True, env=env,
                                  text=True, timeout=RUN_TIMEOUT_S, errors="replace")
        except subprocess.TimeoutExpired:
            return f"error: the command ran past {RUN_TIMEOUT_S} s and was stopped"
        output = (done.stdout + done.stderr)[-MAX_OUTPUT_CHARS:]
        return f"exit code {done.returncode}\n{output}"

    return [list_files, read_file, write_file, run]


def build_agent(rollout: dict, workspace: Workspace, language: str = "python") -> tuple[Agent, dict[str, int]]:
    """The Strands agent, and its model-call counter (the budget hook stops it past the cap)."""
    sampling = rollout.get("sampling_params") or {}
    max_tokens = min(MAX_TOKENS, int(sampling.get("max_tokens") or MAX_TOKENS))
    model = OpenAIModel(
        client_args={"base_url": rollout["base_url"], "api_key": rollout["api_key"], "max_retries": 0,
                     "timeout": MODEL_TIMEOUT_S},
        model_id=rollout["model_id"],
        params={"max_tokens": max_tokens},
    )
    agent = Agent(model=model, tools=make_tools(workspace), system_prompt=SYSTEM_PROMPTS[language],
                  callback_handler=None, conversation_manager=NullConversationManager())
    calls = {"model": 0}

    def budget(event: BeforeModelCallEvent) -> None:
        calls["model"] += 1
        if calls["model"] > MAX_MODEL_CALLS:
            event.cancel = f"stopped: {MAX_MODEL_CALLS} model calls used"

    agent.add_hook(budget, BeforeModelCallEvent)
    return agent, calls


def tool_calls_made(agent: Agent) -> int:
    return sum(1 for message in agent.messages if message["role"] == "assistant"
               for block in message["content"] if "toolUse" in block)


@app.entrypoint
def invoke(payload):
    workspace = Workspace(Path(os.getcwd()) / PROJECT_DIR)
    workspace.lay_out(payload["files"])
    before = {path: workspace.path(path).read_text(encoding="utf-8") for path in workspace.listing()}
    agent, calls = build_agent(payload["_rollout"], workspace, payload.get("language", "python"))
    stop_reason, reply = "end_turn", ""
    try:
        reply = str(agent(payload["instruction"])).strip()
    except MaxTokensReachedException as exc:
        stop_reason, reply = "max_tokens", str(exc)
    except ContextWindowOverflowException as exc:
        stop_reason, reply = "context_window_overflow", str(exc)
    if calls["model"] > MAX_MODEL_CALLS:
        stop_reason = "model_call_budget"
    changed = [path for path in workspace.listing()
               if before.get(path) != workspace.path(path).read_text(encoding="utf-8", errors="replace")]
    return {
        "stop_reason": stop_reason,
        "reply": reply[-2000:],
        "changed_files": changed,
        "tool_calls": tool_calls_made(agent),
        "model_calls": min(calls["model"], MAX_MODEL_CALLS),
    }


if __name__ == "__main__":
    app.run()
