"""WebSockets on the kernel's HTTP server, driven by wsproto's client over raw sockets: echo, pings while
the handler is busy, the message limit (1009), idle close (1001), dropped clients, bad handshakes."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

pytest.importorskip("wsproto", reason="WebSockets need the [openenv] extra (wsproto)")

from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Ping,
    Pong,
    Request,
    TextMessage,
)

from cascade_envs.http_server import Limits, serve
from cascade_envs.websocket import WebSocket, WebSocketRoute


class Echo:
    """``/ws`` echoes text (``"sleep"`` sleeps 1 s first, ``"boom"`` raises); other paths are HTTP."""

    def __init__(self, max_message_bytes: int = 1024, idle_timeout_s: float = 5.0) -> None:
        self.route = WebSocketRoute(self.echo, max_message_bytes, idle_timeout_s)
        self.ended = asyncio.Event()
        self.close_codes: list[int | None] = []

    def websocket_route(self, path: str) -> WebSocketRoute | None:
        return self.route if path == "/ws" else None

    async def handle(self, method: str, path: str, body: bytes) -> tuple[int, dict[str, Any]]:
        return 404, {"error": f"no route {path}"}

    async def echo(self, ws: WebSocket) -> None:
        try:
            while (message := await ws.receive()) is not None:
                if message == "sleep":
                    await asyncio.sleep(1.0)
                if message == "boom":
                    raise RuntimeError("kaput")
                await ws.send(message if isinstance(message, str) else f"{len(message)} bytes")
        finally:
            self.close_codes.append(ws.close_code)
            self.ended.set()


class Client:
    """A wsproto client on one TCP connection."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.conn = WSConnection(ConnectionType.CLIENT)
        self.pending: list[Any] = []

    def send(self, event: Any) -> None:
        self.writer.write(self.conn.send(event))

    async def event(self, timeout: float = 5.0) -> Any:
        """The next event from the server (a ``CloseConnection`` with code 1006 on EOF)."""
        while not self.pending:
            data = await asyncio.wait_for(self.reader.read(1 << 16), timeout)
            self.conn.receive_data(data or None)
            self.pending.extend(self.conn.events())
        return self.pending.pop(0)


@contextlib.asynccontextmanager
async def open_ws(handler: Echo, path: str = "/ws", extra: bytes = b"") -> AsyncIterator[Client]:
    server = await serve(handler, "127.0.0.1", 0, Limits(idle_timeout_s=5))
    reader, writer = await asyncio.open_connection("127.0.0.1", server.sockets[0].getsockname()[1])
    client = Client(reader, writer)
    try:
        writer.write(client.conn.send(Request(host="test", target=path)) + extra)
        assert isinstance(await client.event(), AcceptConnection)
        yield client
    finally:
        writer.close()
        server.close()
        await server.wait_closed()


def test_echo_and_a_clean_close():
    async def scenario() -> None:
        handler = Echo()
        async with open_ws(handler) as client:
            for text in ("hello", "é" * 100, ""):
                client.send(TextMessage(data=text))
                assert (await client.event()).data == text
            client.send(BytesMessage(data=b"\x00" * 10))
            assert (await client.event()).data == "10 bytes"
            client.send(CloseConnection(code=1000, reason="bye"))
            assert isinstance(await client.event(), CloseConnection)
            await asyncio.wait_for(handler.ended.wait(), 5)
            assert handler.close_codes == [1000]

    asyncio.run(scenario())


def test_fragmented_message_and_frames_sent_with_the_handshake():
    async def scenario() -> None:
        handler = Echo()
        early = b"\x81\x85\0\0\0\0hello"  # a masked "hello" frame (zero mask) right after the request
        async with open_ws(handler, extra=early) as client:
            assert (await client.event()).data == "hello"
            client.send(TextMessage(data="ab", message_finished=False))
            client.send(TextMessage(data="cd", message_finished=True))
            assert (await client.event()).data == "abcd"

    asyncio.run(scenario())


def test_pings_are_answered_while_the_handler_is_busy():
    async def scenario() -> None:
        handler = Echo()
        async with open_ws(handler) as client:
            client.send(TextMessage(data="sleep"))
            await asyncio.sleep(0.1)
            client.send(Ping(payload=b"p1"))
            event = await client.event(timeout=0.6)  # well before the 1 s sleep ends
            assert isinstance(event, Pong) and event.payload == b"p1"
            assert (await client.event()).data == "sleep"

    asyncio.run(scenario())


def test_a_message_over_the_limit_closes_with_1009_before_it_all_arrives():
    async def scenario() -> None:
        handler = Echo(max_message_bytes=1024)
        async with open_ws(handler) as client:
            client.send(TextMessage(data="x" * 1024))  # exactly at the limit: served
            assert len((await client.event()).data) == 1024
            # one frame announcing 64 MiB, of which only 8 KiB are ever sent
            client.writer.write(b"\x81\xff" + (64 << 20).to_bytes(8, "big") + b"\0\0\0\0" + b"y" * 8192)
            event = await client.event()
            assert isinstance(event, CloseConnection) and event.code == 1009
            await asyncio.wait_for(handler.ended.wait(), 5)
            assert handler.close_codes == [1009]

    asyncio.run(scenario())


def test_an_idle_connection_is_closed_with_1001():
    async def scenario() -> None:
        handler = Echo(idle_timeout_s=0.3)
        async with open_ws(handler) as client:
            event = await client.event(timeout=3)
            assert isinstance(event, CloseConnection) and event.code == 1001
            assert "idle" in event.reason
            await asyncio.wait_for(handler.ended.wait(), 5)

    asyncio.run(scenario())


def test_a_dropped_client_ends_the_handler():
    async def scenario() -> None:
        handler = Echo()
        async with open_ws(handler) as client:
            client.send(TextMessage(data="sleep"))  # drop the connection mid-request
            await asyncio.sleep(0.1)
            client.writer.transport.abort()
            await asyncio.wait_for(handler.ended.wait(), 5)
            assert handler.close_codes == [1006]

    asyncio.run(scenario())


def test_a_handler_that_raises_closes_with_1011():
    async def scenario() -> None:
        handler = Echo()
        async with open_ws(handler) as client:
            client.send(TextMessage(data="boom"))
            event = await client.event()
            assert isinstance(event, CloseConnection) and event.code == 1011

    asyncio.run(scenario())


def test_upgrades_elsewhere_are_plain_http_and_bad_handshakes_are_400():
    async def scenario() -> None:
        handler = Echo()
        server = await serve(handler, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            for path, key, expected in (
                ("/other", "dGhlIHNhbXBsZSBub25jZQ==", 404),
                ("/ws", None, 400),  # no Sec-WebSocket-Key
            ):
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                head = [f"GET {path} HTTP/1.1", "host: t", "upgrade: websocket", "connection: Upgrade"]
                head += ["sec-websocket-version: 13"] + ([f"sec-websocket-key: {key}"] if key else [])
                writer.write(("\r\n".join(head) + "\r\n\r\n").encode())
                status_line = await asyncio.wait_for(reader.readline(), 5)
                assert int(status_line.split()[1]) == expected, status_line
                rest = await asyncio.wait_for(reader.read(4096), 5)
                assert "error" in json.loads(rest.split(b"\r\n\r\n", 1)[1])
                writer.close()
        finally:
            server.close()
            await server.wait_closed()

    asyncio.run(scenario())
