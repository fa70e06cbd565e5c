"""`sampler=hosted`: the chat backend for the configured provider, checked before any rollout.

Apart from `hosted.py` (the settings and the OpenAI-compatible client) and `bedrock.py` (the
Converse client, which reuses `hosted.py`'s settings and reply parsing), so neither imports the
other's user.
"""

from __future__ import annotations

from typing import Any

from .bedrock import BedrockChat
from .hosted import HostedSettings, NoTokens, OpenAIChat


def build_hosted(settings: HostedSettings, *, client: Any = None) -> tuple[Any, NoTokens]:
    """(the `ChatBackend`, the token-level stand-in) for `settings`, checked before any rollout.
    `client`: a boto3 `bedrock-runtime` client to use (tests pass a stubbed one)."""
    settings.validate()
    if settings.provider == "bedrock":
        chat: Any = BedrockChat(settings, client=client)
    else:
        chat = OpenAIChat(settings)
    chat.check()
    return chat, NoTokens(chat.describe())
