"""The rollout gateway: OpenAI chat/responses and Anthropic messages over a token-level sampler."""

from .rendering import ChatTemplateRenderer, Renderer
from .config import GatewayConfig
from .server import GatewayServer
from .sessions import FinishedSession, SessionStore

__all__ = ["ChatTemplateRenderer", "FinishedSession", "GatewayConfig", "GatewayServer", "Renderer",
           "SessionStore"]
