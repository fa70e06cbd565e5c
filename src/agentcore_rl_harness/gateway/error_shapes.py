"""The OpenAI error body, answered by both OpenAI wires (chat completions, responses) and the
admin API: `{"error": {message, type, code, param}}`. Pure."""

from __future__ import annotations

from typing import Any

__all__ = ["error_json", "openai_error"]


def error_json(message: str, *, type: str, code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type, "code": code, "param": None}}


def openai_error(status: int, message: str, code: str | None) -> dict[str, Any]:
    """The body for an `ApiError` of `status` (an `errors_as` shape)."""
    kind = {401: "authentication_error", 429: "rate_limit_error"}.get(status, "invalid_request_error")
    return error_json(message, type="server_error" if status >= 500 else kind, code=code)
