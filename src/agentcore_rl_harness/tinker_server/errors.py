"""Errors the Tinker server turns into HTTP statuses or failed futures."""

from __future__ import annotations

from ..errors import HarnessError


class TinkerServerError(HarnessError):
    """A request this server cannot serve; `status` is the HTTP status it answers with."""

    status = 400


class BadRequest(TinkerServerError):
    """The request is malformed or asks for something this server does not implement."""


class NotFound(TinkerServerError):
    """An unknown session, model, sampler, future or checkpoint id."""

    status = 404


class Gone(TinkerServerError):
    """The session was finished (the SDK stops heartbeating on 410)."""

    status = 410
