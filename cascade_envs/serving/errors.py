"""The errors a protocol handler raises; the router turns each into its status and a JSON ``error``."""

from __future__ import annotations


class ServingError(Exception):
    """An error answered with ``status`` and ``{"error": message}`` (``retry_after``: a 429/503 hint)."""

    status = 500

    def __init__(self, message: str, *, status: int | None = None, retry_after: float | None = None):
        super().__init__(message)
        if status is not None:
            self.status = status
        self.retry_after = retry_after


class BadRequest(ServingError):
    """400: malformed JSON, ids, messages or arguments."""

    status = 400


class UnknownSession(ServingError):
    """404: no live session has this id (never made, closed, expired, or another server's)."""

    status = 404


class NotFound(ServingError):
    """404: no such route."""

    status = 404


class Conflict(ServingError):
    """409: the request does not fit the session's state (a step before reset, after the end, ...)."""

    status = 409


class Overloaded(ServingError):
    """503: the server holds its maximum of live sessions; retry after ``retry_after`` seconds."""

    status = 503


class DeadlineExceeded(ServingError):
    """504: the request did not finish within its deadline."""

    status = 504
