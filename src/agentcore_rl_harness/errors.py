"""Exceptions the harness raises. Third-party errors are translated at the seam into these."""

import os
import traceback

ERROR_TEXT_LIMIT = 4000


class HarnessError(Exception):
    """Base class: something the harness itself could not do (an infrastructure failure)."""


class ConfigError(HarnessError):
    """A configuration value is wrong; the message names the key, the value and the fix."""


class ConfigWarning(UserWarning):
    """The config was composed, but something in it was left out; the message says what."""


class ModelError(HarnessError):
    """A named model cannot be found, prepared or loaded."""


class DatasetError(HarnessError):
    """A task dataset cannot be loaded or has bad rows."""


class SamplingError(HarnessError):
    """The sampling backend failed or returned unusable output (e.g. no logprobs)."""


class RenderError(HarnessError):
    """Messages cannot be rendered with the policy's chat template (e.g. tools unsupported)."""


class RuntimeStartError(HarnessError):
    """An agent runtime could not start a session for reasons outside the agent's code."""


class SandboxError(HarnessError):
    """A command or file operation in a session's sandbox could not be done (it is gone, a file
    is missing or too large); the message names the session and the path."""


class EnvironmentBuildError(HarnessError):
    """A task's environment (its root filesystem) cannot be read, built or used; the message
    names the environment, what failed and the command that fixes it."""


class MissingDependencyError(HarnessError, ImportError):
    """An optional dependency is not installed; the message says what to pip install."""


class ChoiceError(ConfigError, ValueError):
    """A value is not one of its fixed choices (also a ValueError, for callers that catch that)."""


class RewardError(ValueError):
    """A reward that is not a finite number. The task's fault: the rollout is `task_failed`."""


class JudgeError(Exception):
    """A judged reward got no usable score from the judge model (malformed answers after the
    retries, or failed calls): the rollout is `judge_error`, never a silent 0."""


def is_verdict(exc: BaseException) -> bool:
    """A task's verdict (its assertion failed, a reward is not a number), not a bug in its code."""
    return isinstance(exc, (AssertionError, RewardError))


def failure_text(exc: BaseException, summary: str | None = None) -> str:
    """How task code failed: a verdict (AssertionError, RewardError) as its message; any other
    exception (a bug in the task's payload, rewards or body) with its traceback's tail."""
    head = (summary or f"{type(exc).__name__}: {exc}")[:ERROR_TEXT_LIMIT]
    if is_verdict(exc):
        return head
    trace = user_traceback(exc)
    room = ERROR_TEXT_LIMIT - len(head) - 1
    return f"{head}\n{trace[-room:]}" if room > 0 else head


_HARNESS_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_MACHINERY = (_HARNESS_DIR, f"{os.sep}_pytest{os.sep}", f"{os.sep}pluggy{os.sep}",
              f"{os.sep}asyncio{os.sep}", f"{os.sep}concurrent{os.sep}")


def user_traceback(exc: BaseException) -> str:
    """The traceback of an exception in the user's code, without the frames of pytest, pluggy,
    asyncio and this harness that called it (a chained exception's are kept whole)."""
    frames = [frame for frame in traceback.extract_tb(exc.__traceback__)
              if not any(part in os.path.abspath(frame.filename) for part in _MACHINERY)]
    if not frames:
        return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    lines = ["Traceback (most recent call last):\n", *traceback.format_list(frames),
             *traceback.format_exception_only(type(exc), exc)]
    return "".join(lines)
