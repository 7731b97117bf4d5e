"""A JSON router over the HTTP layer's ``handle_request``: routes, JSON bodies, errors as statuses."""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from ..http_server import Request, Response
from .errors import BadRequest, NotFound, ServingError

log = logging.getLogger("cascade_envs.serving")

Route = Callable[[Request], Awaitable[Response | Any]]
"""A route: a ``Response``, or any JSON-encodable value answered with 200."""


def json_body(request: Request, *, allow_empty: bool = False) -> dict[str, Any]:
    """The request body as a JSON object (``BadRequest`` otherwise; an empty body is ``{}`` if allowed)."""
    if not request.body.strip():
        if allow_empty:
            return {}
        raise BadRequest("the request needs a JSON object body")
    try:
        value = json.loads(request.body)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BadRequest(f"the body is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise BadRequest(f"the body must be a JSON object, got {type(value).__name__}")
    return value


def error_response(exc: ServingError) -> Response:
    """``exc`` as its status and ``{"error": message}`` (with ``Retry-After`` when it has one)."""
    headers = [("retry-after", str(max(1, round(exc.retry_after))))] if exc.retry_after else []
    return Response(exc.status, {"error": str(exc)}, headers)


class Router:
    """``(method, path) -> Route``, plus an optional ``fallback`` for ``POST`` paths no route names.

    ``ServingError`` becomes its status; any other exception propagates to the HTTP layer (500).
    """

    def __init__(self, fallback: Route | None = None):
        self.routes: dict[tuple[str, str], Route] = {}
        self.fallback = fallback

    def add(self, method: str, path: str, route: Route) -> None:
        self.routes[(method.upper(), path)] = route

    async def handle_request(self, request: Request) -> Response:
        route = self.routes.get((request.method, request.path))
        if route is None:
            if any(path == request.path for _, path in self.routes):
                return Response(405, {"error": f"{request.method} is not allowed on {request.path}"})
            if self.fallback is None or request.method != "POST":
                return error_response(NotFound(f"no route {request.method} {request.path}"))
            route = self.fallback
        try:
            answer = await route(request)
        except ServingError as exc:
            return error_response(exc)
        return answer if isinstance(answer, Response) else Response(200, answer)
