"""Teacher forcing: a session whose model calls are answered from a script of assistant turns.

An oracle that acts (its tools change the sandbox) is a script: `[{"tool_calls": [{"name",
"arguments"}]}, ..., {"content": "final answer"}]`, the assistant turns in OpenAI chat shape. A
session opened with one answers each model request with the next turn instead of sampling: the
turn is rendered through the session's chat template and tool-call format exactly as the template
renders it in a history (so a later request that repeats it continues the same row, no drift),
its token ids are recorded as the sample, and the reply the agent receives is parsed back from
those tokens like any sampled reply. The real agent then runs the real tools, and the session's
traces are an exact demonstration: the forced tokens carry loss mask 1.

Logprobs of forced tokens: the policy's own (`sampler.score`, under softmax(logits / temperature)
at the session's temperature, 1 for greedy) when the sampler can score them and the session was
not opened with `score_forced=False` (the warm-up's demonstrations: cross-entropy needs none),
else 0.0; traces say which in `metadata["forced_logprobs"]` ("policy" or "zero") and carry `teacher_forced: true`.
A forced turn is not cut at the session's `max_tokens`: a demonstration is kept whole.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import HarnessError, SamplingError
from ..records import FinishReason, SampleResult, SamplingParams
from .rendering import Message, Renderer, message_key, normalize_message
from .sampling import SamplingBackend

SCRIPT_KEY = "_script"


class ScriptError(HarnessError):
    """A scripted session cannot answer a request: the script is bad, used up, or the template
    cannot carry one of its turns. The agent's request gets a 400 with `code`."""

    def __init__(self, message: str, *, code: str = "script_invalid") -> None:
        super().__init__(message)
        self.code = code


def normalize_script(script: Any, *, where: str = "_script") -> tuple[Message, ...]:
    """The script's turns as normalised assistant messages; a `ScriptError` naming the bad turn."""
    if isinstance(script, (str, bytes)) or not isinstance(script, Sequence) or not script:
        raise ScriptError(f"{where} must be a non-empty list of assistant turns, got {script!r:.120}")
    turns = []
    for index, turn in enumerate(script):
        label = f"{where}[{index}]"
        if not isinstance(turn, Mapping) or not ({"content", "tool_calls"} & set(turn)):
            raise ScriptError(
                f"{label} must be an assistant turn: {{\"tool_calls\": [{{\"name\": ..., \"arguments\": "
                f"{{...}}}}]}} or {{\"content\": \"...\"}}; got {turn!r:.200}")
        calls = turn.get("tool_calls") or []
        if not isinstance(calls, Sequence) or isinstance(calls, (str, bytes)):
            raise ScriptError(f"{label}.tool_calls must be a list, got {calls!r:.120}")
        shaped = []
        for number, call in enumerate(calls):
            function = call.get("function", call) if isinstance(call, Mapping) else None
            name = function.get("name") if isinstance(function, Mapping) else None
            arguments = function.get("arguments", {}) if isinstance(function, Mapping) else None
            if isinstance(arguments, str):
                try:
                    arguments = json.loads(arguments)
                except json.JSONDecodeError:
                    arguments = None
            if not isinstance(name, str) or not name or not isinstance(arguments, Mapping):
                raise ScriptError(
                    f"{label}.tool_calls[{number}] needs a non-empty 'name' and 'arguments' as an "
                    f"object, got {call!r:.200}")
            shaped.append({"type": "function", "function": {"name": name, "arguments": dict(arguments)}})
        content = turn.get("content")
        if content is not None and not isinstance(content, str):
            raise ScriptError(f"{label}.content must be a string, got {type(content).__name__}")
        message: dict[str, Any] = {"role": "assistant", "content": content or ""}
        if shaped:
            message["tool_calls"] = shaped
        turns.append(normalize_message(message))
    return tuple(turns)


def forced_tokens(renderer: Renderer, messages: Sequence[Message], reply: Message,
                  tools: Sequence[Mapping[str, Any]] | None) -> tuple[int, ...]:
    """The token ids of `reply` as the template writes it after `messages` (its generation
    prompt): the reply's text up to its end-of-turn token, then that token."""
    render = renderer.render_normalized
    head = render(list(messages), tools=tools, add_generation_prompt=True)
    with_reply = render([*messages, reply], tools=tools, add_generation_prompt=False)
    if not with_reply.startswith(head):
        raise ScriptError(
            "the chat template does not render a scripted assistant turn as a continuation of its "
            "generation prompt, so it cannot be forced exactly", code="script_unrenderable")
    block = with_reply[len(head):]
    end = renderer.end_of_turn
    cut = block.find(end) if end else -1
    text = block[:cut] if cut >= 0 else block
    return (*renderer.encode(text), renderer.stop_token_ids[0])


def check_round_trip(renderer: Renderer, token_ids: Sequence[int], reply: Message,
                     tools: Sequence[Mapping[str, Any]] | None, index: int) -> None:
    """The agent must receive the scripted turn itself: parse the forced tokens back and compare."""
    text = renderer.decode(token_ids[:-1])
    parsed = renderer.parse_reply(text, tools=tools).to_message()
    if message_key(parsed) != message_key(reply):
        raise ScriptError(
            f"_script[{index}] does not survive the chat template's tool-call format: rendered as "
            f"{text!r:.300}, it parses back as {parsed!r:.300}", code="script_unrenderable")


async def forced_sample(*, sampler: SamplingBackend, renderer: Renderer, prompt_token_ids: Sequence[int],
                        messages: Sequence[Message], reply: Message, index: int,
                        tools: Sequence[Mapping[str, Any]] | None, params: SamplingParams,
                        policy_version: int = 0, score: bool = True) -> tuple[SampleResult, str]:
    """The scripted `reply` as a sample, and where its logprobs come from ("policy" / "zero"):
    the policy's when `score` and the sampler can score them."""
    token_ids = forced_tokens(renderer, messages, reply, tools)
    check_round_trip(renderer, token_ids, reply, tools, index)
    source = "zero"
    logprobs: tuple[float, ...] = (0.0,) * len(token_ids)
    if score and prompt_token_ids:
        temperature = params.temperature if params.temperature > 0 else 1.0
        try:
            logprobs = tuple(float(v) for v in await sampler.score(
                prompt_token_ids=list(prompt_token_ids), completion_token_ids=list(token_ids),
                temperature=temperature))
            source = "policy"
        except SamplingError:  # a sampler that cannot score, or not at this temperature: "zero"
            logprobs = (0.0,) * len(token_ids)
    version = policy_version if sampler.policy_version is None else int(sampler.policy_version)
    return SampleResult(token_ids=token_ids, logprobs=logprobs, finish_reason=FinishReason.STOP,
                        policy_version=version), source
