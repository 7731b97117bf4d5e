"""WebSocket connections on the kernel's HTTP server (``http_server``), with ``wsproto``.

A handler that serves WebSockets defines ``websocket_route(path) -> WebSocketRoute | None``. When a
request asks to upgrade (``Upgrade: websocket``) on a path that method accepts, ``http_server`` hands
the connection here: the handshake is answered (101, or 400 for a malformed one, no extensions, so
no compression), then ``route.handler(ws)`` runs for the life of the connection and the TCP
connection is closed when it returns. The limits:

- a message over ``route.max_message_bytes`` (text counted in characters) closes the connection
  with 1009 as soon as its received part passes the limit (so a huge frame is never held whole);
- ``ws.receive()`` gives up after ``route.idle_timeout_s`` without a message (pings do not count)
  and closes with 1001;
- pings are answered at once by a reader task, also while the handler is busy;
- ``receive()`` returns None once the connection is closed, by either side or by a dropped TCP
  connection, so the handler can free what it held; a handler that raises closes with 1011.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import h11
from wsproto import ConnectionType, WSConnection
from wsproto.connection import ConnectionState
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Ping,
    RejectConnection,
    Request,
    TextMessage,
)
from wsproto.utilities import RemoteProtocolError

log = logging.getLogger("cascade_envs.websocket")

READ_CHUNK = 1 << 16
CLOSE_TIMEOUT_S = 2.0
"""How long a closing connection waits for the peer's close frame before dropping TCP."""
NORMAL, GOING_AWAY, TOO_BIG, INTERNAL_ERROR = 1000, 1001, 1009, 1011


@dataclass(frozen=True)
class WebSocketRoute:
    """What a handler's ``websocket_route(path)`` returns for a path that serves WebSockets."""

    handler: Callable[[WebSocket], Awaitable[None]]
    max_message_bytes: int = 8 << 20
    idle_timeout_s: float = 600.0


class WebSocket:
    """One open WebSocket: ``receive`` text or bytes messages, ``send`` text, ``close``."""

    def __init__(
        self,
        conn: WSConnection,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        route: WebSocketRoute,
        received: bytes = b"",
    ):
        """``received``: bytes that arrived right after the handshake (already WebSocket frames)."""
        self._conn, self._reader, self._writer, self._route = conn, reader, writer, route
        self._received = received
        self._messages: asyncio.Queue[str | bytes | None] = asyncio.Queue(maxsize=4)
        self._closed = asyncio.Event()
        self.close_code: int | None = None
        """The close code once closed (the peer's or ours), else None."""
        self._reading = asyncio.get_running_loop().create_task(self._read())

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    async def receive(self) -> str | bytes | None:
        """The next complete message; None once the connection is closed or idles out."""
        if self.closed and self._messages.empty():
            return None
        try:
            return await asyncio.wait_for(self._messages.get(), self._route.idle_timeout_s)
        except TimeoutError:
            await self.close(GOING_AWAY, f"idle for {self._route.idle_timeout_s:g} s")
            return None

    async def send(self, text: str) -> None:
        """Send one text message (dropped silently when the connection is already closed)."""
        if self.closed or self._conn.state is not ConnectionState.OPEN:
            return
        self._write(self._conn.send(TextMessage(data=text)))
        with contextlib.suppress(ConnectionError):
            await self._writer.drain()

    async def close(self, code: int = NORMAL, reason: str = "") -> None:
        """Close the connection with ``code`` (a no-op when it is closed already)."""
        if self._conn.state is ConnectionState.OPEN:
            self._write(self._conn.send(CloseConnection(code=code, reason=reason[:120])))
            self.close_code = code
        self._finish()
        with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError, Exception):
            await asyncio.wait_for(asyncio.shield(self._reading), CLOSE_TIMEOUT_S)
        self._reading.cancel()

    def _write(self, data: bytes) -> None:
        if data and not self._writer.is_closing():
            self._writer.write(data)

    def _finish(self) -> None:
        if not self._closed.is_set():
            self._closed.set()
            with contextlib.suppress(asyncio.QueueFull):
                self._messages.put_nowait(None)

    async def _read(self) -> None:
        """Feed received bytes to wsproto; answer pings and closes; queue complete messages."""
        parts: list[str | bytes] = []
        size = 0
        try:
            while self._conn.state in (ConnectionState.OPEN, ConnectionState.LOCAL_CLOSING):
                data, self._received = self._received or await self._reader.read(READ_CHUNK), b""
                self._conn.receive_data(data or None)
                for event in self._conn.events():
                    if isinstance(event, Ping):
                        self._write(self._conn.send(event.response()))
                    elif isinstance(event, CloseConnection):
                        if self.close_code is None:
                            self.close_code = event.code
                        if self._conn.state is ConnectionState.REMOTE_CLOSING:
                            self._write(self._conn.send(event.response()))
                        self._finish()
                        return
                    elif isinstance(event, (TextMessage, BytesMessage)) and not self.closed:
                        size += len(event.data)
                        if size > self._route.max_message_bytes:
                            limit = self._route.max_message_bytes
                            self._write(
                                self._conn.send(CloseConnection(TOO_BIG, f"message over {limit} bytes"))
                            )
                            self.close_code = TOO_BIG
                            self._finish()
                            continue  # wait for the peer's close frame (or EOF)
                        parts.append(event.data if isinstance(event.data, str) else bytes(event.data))
                        if event.message_finished:
                            message = _join(parts)
                            parts, size = [], 0
                            await self._messages.put(message)
                await self._writer.drain()
        except (ConnectionError, RemoteProtocolError) as exc:
            log.debug("websocket read ended: %s", exc)
        finally:
            self._finish()


def _join(parts: list[str | bytes]) -> str | bytes:
    if all(isinstance(p, str) for p in parts):
        return "".join(p for p in parts if isinstance(p, str))
    return b"".join(p if isinstance(p, bytes) else p.encode() for p in parts)


async def serve_upgraded(
    route: WebSocketRoute,
    conn: h11.Connection,
    request: h11.Request,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
) -> None:
    """Answer the upgrade ``request`` h11 has read on ``conn`` and run ``route.handler`` on the socket."""
    ws_conn = WSConnection(ConnectionType.SERVER)
    trailing = b""
    if conn.next_event() is h11.PAUSED:  # h11 stops at the switch; what came after is WebSocket data
        trailing = conn.trailing_data[0]
    try:
        ws_conn.initiate_upgrade_connection(list(request.headers), request.target)
        if not any(isinstance(e, Request) for e in ws_conn.events()):
            raise RemoteProtocolError("not a WebSocket handshake", event_hint=RejectConnection())
    except RemoteProtocolError as exc:
        writer.write(_plain_400(json.dumps({"error": f"bad WebSocket handshake: {exc}"}).encode()))
        with contextlib.suppress(ConnectionError):
            await writer.drain()
        return
    writer.write(ws_conn.send(AcceptConnection()))
    ws = WebSocket(ws_conn, reader, writer, route, trailing)
    try:
        await route.handler(ws)
    except Exception:
        log.exception("WebSocket handler failed on %s", request.target.decode("latin-1"))
        await ws.close(INTERNAL_ERROR, "internal error")
    finally:
        await ws.close()


def _plain_400(body: bytes) -> bytes:
    return (
        b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\n"
        + f"content-length: {len(body)}\r\nconnection: close\r\n\r\n".encode()
        + body
    )
