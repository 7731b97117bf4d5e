"""The kernel's HTTP/1.1 server: JSON routes over h11 on asyncio, with the limits every service needs.

``await serve(handler, host, port, limits)`` listens (port 0 picks a free port) and passes each
complete request to ``handler.handle(method, path, body)`` (the path without its query string),
which returns ``(status, JSON object)``; the answer goes back as ``application/json``, with
``Retry-After: 1`` on a 429 or 503. A handler that needs the headers (cookies, say) or sets its
own defines ``handle_request(Request) -> Response`` instead. Connections are kept alive between
requests. The layer itself answers:

- ``401`` when ``serve(..., token=T)`` was given a bearer token and the request's
  ``Authorization: Bearer ...`` does not match it (compared in constant time, before any body is read);

- ``413`` for a body over ``limits.max_body_mb``: at once from its ``Content-Length``, or as soon as
  a chunked body passes the limit;
- ``408`` for a request whose headers and body take longer than ``limits.request_timeout_s`` to
  arrive after its first byte (a client trickling a byte at a time included);
- a connection that sends nothing for ``limits.idle_timeout_s`` (between requests, or before a
  request's headers are complete) is closed without an answer;
- malformed HTTP gets h11's 4xx status (``{"error": "bad HTTP request: ..."}``) and a close;
- ``500`` with the exception named when the handler raises; the server goes on serving.

After an answer sent before the whole request arrived (413, 408) the server stops writing, reads and
drops what the client still sends for up to ``LINGER_S`` and then closes, so the client reads the
answer rather than a connection reset. A handler with ``websocket_route(path)`` also serves
WebSockets (``cascade_envs.websocket``). Used by ``cascade-envs serve``, ``serve-sandbox`` and
``serve-judge``, which run under ``run_until_stopped`` (SIGINT or SIGTERM ends them cleanly).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import math
import signal
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import h11

log = logging.getLogger("cascade_envs.http_server")

MAX_BODY_MB = 8.0
"""Default request body limit: a code task row with its tests and an answer fits (large test data
travels zlib-packed); parsing a body of this size as JSON holds the GIL for at most about half a second
even when it is built to be slow."""
IDLE_TIMEOUT_S = 30.0
"""Default: a connection that sends nothing for this long (between or within requests) is closed."""
REQUEST_TIMEOUT_S = 60.0
"""Default: a request's headers and body must arrive within this long of its first byte (else 408)."""
MAX_HEADER_BYTES = 1 << 20
"""The request line and headers together; h11 answers 431 past it."""
LINGER_S = 2.0
"""After an early answer (413, 408) the rest of the request is read and dropped for up to this long."""
READ_CHUNK = 1 << 16
READ_BUFFER = 1 << 20
"""The connection's read buffer (reading pauses while it holds twice this)."""


class Handler(Protocol):
    """What ``serve`` calls for each complete request."""

    async def handle(self, method: str, path: str, body: bytes) -> tuple[int, dict[str, Any]]:
        """``(status, JSON object)`` for one request; ``path`` has no query string."""
        ...


@dataclass(frozen=True)
class Request:
    """One complete request: ``headers`` has lower-cased names (repeated ones joined by ``", "``)."""

    method: str
    path: str
    query: str
    headers: Mapping[str, str]
    body: bytes

    def cookie(self, name: str) -> str | None:
        """The value of cookie ``name`` (from the ``Cookie`` header), or None."""
        for part in self.headers.get("cookie", "").split(";"):
            key, sep, value = part.strip().partition("=")
            if sep and key == name:
                return value
        return None


@dataclass
class Response:
    """What ``handle_request`` returns: a JSON-encodable body and extra headers (``Set-Cookie``, ...)."""

    status: int
    body: Any
    headers: list[tuple[str, str]] = field(default_factory=list)


class RequestHandler(Protocol):
    """The richer handler: sees the headers and sets its own."""

    async def handle_request(self, request: Request) -> Response:
        """The response to one request."""
        ...


@dataclass(frozen=True)
class Limits:
    """The server's limits (see the module docstring); each a positive finite number."""

    max_body_mb: float = MAX_BODY_MB
    idle_timeout_s: float = IDLE_TIMEOUT_S
    request_timeout_s: float = REQUEST_TIMEOUT_S

    def __post_init__(self) -> None:
        for name in ("max_body_mb", "idle_timeout_s", "request_timeout_s"):
            value = getattr(self, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not math.isfinite(value)
                or value <= 0
            ):
                raise ValueError(f"{name} must be a positive number, got {value!r}")

    @property
    def max_body(self) -> int:
        """The body limit in bytes."""
        return int(self.max_body_mb * (1 << 20))


async def serve(
    handler: Handler | RequestHandler,
    host: str,
    port: int,
    limits: Limits | None = None,
    *,
    token: str | None = None,
) -> asyncio.Server:
    """Start serving ``handler`` on ``host:port`` (0: a free port) and return the listening server.

    ``token``: every request must carry ``Authorization: Bearer <token>`` (else 401); see
    ``cascade_envs.serving.auth.check_access`` for when one is needed.
    """
    limits = limits or Limits()
    if token is not None and not token:
        raise ValueError("token must be a non-empty string")
    return await asyncio.start_server(
        lambda r, w: _serve_connection(handler, r, w, limits, token), host, port, limit=READ_BUFFER
    )


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
"""What ends a server cleanly: Ctrl-C, and what ``docker stop``, Kubernetes and systemd send."""


def run_until_stopped(main: Callable[[], Awaitable[None]], name: str) -> None:
    """Run a server's ``main()`` until SIGINT or SIGTERM, then return.

    Either signal cancels ``main``, so its ``finally`` blocks (closing sessions, sandboxes, models)
    run before the process exits 0; without this SIGTERM would kill it mid-request. A second signal
    cancels that cleanup. Signals are caught only when called from the main thread.
    """

    async def guarded() -> None:
        task = asyncio.current_task()
        assert task is not None
        received: list[str] = []

        def stop(sig: signal.Signals) -> None:
            received.append(sig.name)
            task.cancel()

        if threading.current_thread() is threading.main_thread():
            loop = asyncio.get_running_loop()
            for sig in STOP_SIGNALS:
                loop.add_signal_handler(sig, stop, sig)
        try:
            await main()
        except asyncio.CancelledError:
            if not received:
                raise
        if received:
            print(f"{name}: stopped ({received[0]})", file=sys.stderr, flush=True)

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(guarded())


def _headers(request: h11.Request) -> dict[str, str]:
    headers: dict[str, str] = {}
    for name, value in request.headers:
        key, text = name.decode("latin-1"), value.decode("latin-1")
        headers[key] = f"{headers[key]}, {text}" if key in headers else text
    return headers


def authorized(headers: Mapping[str, str], token: str) -> bool:
    """True when ``headers`` carry ``Authorization: Bearer <token>`` (constant-time comparison)."""
    scheme, _, given = headers.get("authorization", "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token.encode())


def _content_length(request: h11.Request) -> int | None:
    for name, value in request.headers:
        if name == b"content-length":
            return int(value)  # h11 has checked it is a number
    return None


def _websocket_route(handler: Handler | RequestHandler, request: h11.Request) -> Any:
    """The handler's ``WebSocketRoute`` for an upgrade request to a path it serves WebSockets on, else None."""
    routes = getattr(handler, "websocket_route", None)
    if routes is None or not any(
        name == b"upgrade" and value.strip().lower() == b"websocket" for name, value in request.headers
    ):
        return None
    return routes(request.target.decode("latin-1").split("?", 1)[0])


Answer = tuple[int, bytes, list[tuple[str, str]]]


def _error(status: int, message: str, headers: list[tuple[str, str]] | None = None) -> Answer:
    return status, json.dumps({"error": message}).encode(), headers or []


UNAUTHORIZED = _error(
    401, "missing or wrong bearer token (Authorization: Bearer ...)", [("www-authenticate", "Bearer")]
)


async def _call(handler: Handler | RequestHandler, request: h11.Request, body: bytes) -> Answer:
    """The handler's answer as JSON; a 500 naming the exception if it raises or its answer is not JSON."""
    method = request.method.decode("latin-1")
    path, _, query = request.target.decode("latin-1").partition("?")
    try:
        rich = getattr(handler, "handle_request", None)
        if rich is not None:
            response: Response = await rich(Request(method, path, query, _headers(request), body))
            return response.status, json.dumps(response.body).encode(), list(response.headers)
        status, answer = await handler.handle(method, path, body)  # type: ignore[union-attr]
        return status, json.dumps(answer).encode(), []
    except Exception as exc:
        log.exception("%s %s failed", method, path)
        return _error(500, f"{type(exc).__name__}: {exc}")


async def _serve_connection(
    handler: Handler | RequestHandler,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    limits: Limits,
    token: str | None = None,
) -> None:
    """Serve one connection's requests in turn until it closes, idles out or errs."""
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEADER_BYTES)
    loop = asyncio.get_running_loop()
    too_large = _error(413, f"request body over the limit of {limits.max_body_mb:g} MiB")
    try:
        while True:
            request: h11.Request | None = None
            chunks: list[bytes] = []
            size, started = 0, None
            answer: Answer | None = None
            while answer is None:
                event = conn.next_event()
                if event is h11.NEED_DATA:
                    wait = limits.idle_timeout_s
                    if started is not None:
                        wait = min(wait, started + limits.request_timeout_s - loop.time())
                    try:
                        data = await asyncio.wait_for(reader.read(READ_CHUNK), max(wait, 0.0))
                    except TimeoutError:
                        if request is None:
                            return  # idle, or headers that never completed: close without a word
                        answer = _error(408, "the request did not arrive in time")
                        break
                    if data and started is None:
                        started = loop.time()
                    conn.receive_data(data)
                    if not data and conn.their_state is not h11.DONE:
                        return
                elif isinstance(event, h11.ConnectionClosed):
                    return
                elif isinstance(event, h11.Request):
                    request = event
                    started = loop.time() if started is None else started
                    length = _content_length(event)
                    if token is not None and not authorized(_headers(event), token):
                        answer = UNAUTHORIZED
                    elif length is not None and length > limits.max_body:
                        answer = too_large
                elif isinstance(event, h11.Data):
                    size += len(event.data)
                    if size > limits.max_body:
                        answer = too_large
                    else:
                        chunks.append(bytes(event.data))
                elif isinstance(event, h11.EndOfMessage):
                    assert request is not None
                    if (route := _websocket_route(handler, request)) is not None:
                        from .websocket import serve_upgraded  # needs wsproto: imported on first use

                        await serve_upgraded(route, conn, request, reader, writer)
                        return
                    answer = await _call(handler, request, b"".join(chunks))
            early = conn.their_state is not h11.DONE  # answered before the whole request arrived
            await _respond(conn, writer, *answer, close=early)
            if early:
                await _linger(reader, writer)
                return
            if conn.our_state is h11.MUST_CLOSE:
                return
            conn.start_next_cycle()
    except h11.RemoteProtocolError as exc:  # malformed HTTP: answer if h11 still lets us, then close
        with contextlib.suppress(Exception):
            await _respond(
                conn, writer, *_error(exc.error_status_hint, f"bad HTTP request: {exc}"), close=True
            )
    except (ConnectionError, asyncio.CancelledError):
        return  # a broken client, or the server shutting down
    finally:
        writer.close()


async def _respond(
    conn: h11.Connection,
    writer: asyncio.StreamWriter,
    status: int,
    data: bytes,
    extra: list[tuple[str, str]] | None = None,
    close: bool = False,
) -> None:
    extra = extra or []
    headers = [("content-type", "application/json"), ("content-length", str(len(data))), *extra]
    if status in (429, 503) and not any(k.lower() == "retry-after" for k, _ in extra):
        headers.append(("retry-after", "1"))
    if close:
        headers.append(("connection", "close"))
    writer.write(
        conn.send(h11.Response(status_code=status, headers=headers))
        + conn.send(h11.Data(data=data))
        + conn.send(h11.EndOfMessage())
    )
    await writer.drain()


async def _linger(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Read and drop what the client still sends, briefly, so it can read the answer sent early."""
    with contextlib.suppress(Exception):
        if writer.can_write_eof():
            writer.write_eof()
        end = time.monotonic() + LINGER_S
        while (left := end - time.monotonic()) > 0:
            chunk: bytes = await asyncio.wait_for(reader.read(READ_CHUNK), left)
            if not chunk:
                break
