"""The kernel's HTTP server over raw sockets: routing, keep-alive, limits (413, 408, idle), bad HTTP, handler errors."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from cascade_envs.http_server import Limits, serve

SMALL = Limits(max_body_mb=1 / 1024, idle_timeout_s=0.3, request_timeout_s=1.0)
"""A 1 KiB body limit, 0.3 s idle, 1 s for a request to arrive."""


class Recorder:
    """Echoes what it was asked; ``/boom`` raises, ``/busy`` is a 429, ``/unencodable`` answers no JSON."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, bytes]] = []

    async def handle(self, method: str, path: str, body: bytes) -> tuple[int, dict[str, Any]]:
        self.seen.append((method, path, body))
        if path == "/boom":
            raise RuntimeError("kaput")
        if path == "/busy":
            return 429, {"error": "busy"}
        if path == "/unencodable":
            return 200, {"value": object()}
        return 201, {"method": method, "path": path, "body": body.decode()}


@contextlib.asynccontextmanager
async def connection(
    limits: Limits = SMALL,
) -> AsyncIterator[tuple[Recorder, asyncio.StreamReader, asyncio.StreamWriter]]:
    """A server on a free port with one open client connection to it."""
    handler = Recorder()
    server = await serve(handler, "127.0.0.1", 0, limits)
    reader, writer = await asyncio.open_connection("127.0.0.1", server.sockets[0].getsockname()[1])
    try:
        yield handler, reader, writer
    finally:
        writer.close()
        server.close()
        await server.wait_closed()


def request(method: str, path: str, body: bytes = b"", *extra: str) -> bytes:
    head = [f"{method} {path} HTTP/1.1", "host: test", f"content-length: {len(body)}", *extra]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


async def read_answer(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], dict[str, Any]]:
    """One response: status, lower-cased headers, JSON body."""
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    status_line, *lines = head.decode("latin-1").split("\r\n")[:-2]
    headers = {name.lower(): value.strip() for name, value in (line.split(":", 1) for line in lines)}
    body = await asyncio.wait_for(reader.readexactly(int(headers["content-length"])), 5)
    assert headers["content-type"] == "application/json"
    return int(status_line.split()[1]), headers, json.loads(body)


async def closed_within(reader: asyncio.StreamReader, seconds: float) -> float:
    """Seconds until the server closes the connection, having sent nothing more."""
    start = time.monotonic()
    assert await asyncio.wait_for(reader.read(), seconds) == b""
    return time.monotonic() - start


def test_two_requests_on_one_kept_alive_connection():
    async def scenario() -> None:
        async with connection() as (handler, reader, writer):
            writer.write(request("POST", "/echo?x=1", b'{"a": 1}'))
            status, headers, answer = await read_answer(reader)
            assert status == 201 and "connection" not in headers
            assert answer == {"method": "POST", "path": "/echo", "body": '{"a": 1}'}
            writer.write(request("GET", "/second"))
            status, _, answer = await read_answer(reader)
            assert status == 201 and answer["path"] == "/second" and answer["body"] == ""
            assert handler.seen == [("POST", "/echo", b'{"a": 1}'), ("GET", "/second", b"")]

    asyncio.run(scenario())


def test_a_body_over_the_limit_is_413_and_one_at_the_limit_is_served():
    async def scenario() -> None:
        async with connection() as (handler, reader, writer):
            writer.write(request("POST", "/echo", b"x" * 1024))  # exactly 1 KiB
            assert (await read_answer(reader))[0] == 201
            writer.write(request("POST", "/echo", b"x" * 1025))
            status, headers, answer = await read_answer(reader)
            assert (
                status == 413
                and headers["connection"] == "close"
                and "limit of 0.000976562 MiB" in answer["error"]
            )
            assert await closed_within(reader, 5) < 1
            assert len(handler.seen) == 1
        # announced too large: answered from the headers; the body the client goes on sending is read
        # and dropped (a lingering close), so the answer is not lost to a connection reset
        async with connection() as (handler, reader, writer):
            writer.write(b"POST /echo HTTP/1.1\r\nhost: t\r\ncontent-length: 5000000\r\n\r\n")
            writer.write(b"z" * 5_000_000)
            await asyncio.wait_for(writer.drain(), 5)  # a reset here would lose the answer
            assert (await read_answer(reader))[0] == 413
        # chunked (no content-length): cut off once the chunks pass the limit
        async with connection() as (handler, reader, writer):
            writer.write(b"POST /echo HTTP/1.1\r\nhost: t\r\ntransfer-encoding: chunked\r\n\r\n")
            for _ in range(3):
                writer.write(b"200\r\n" + b"y" * 512 + b"\r\n")
            assert (await read_answer(reader))[0] == 413
            assert handler.seen == []

    asyncio.run(scenario())


def test_a_request_that_stops_arriving_or_trickles_in_is_408():
    async def scenario() -> None:
        async with connection() as (handler, reader, writer):
            start = time.monotonic()
            writer.write(request("POST", "/echo", b"12345")[:-3])  # the body stops two bytes in
            status, headers, answer = await read_answer(reader)
            assert status == 408 and headers["connection"] == "close" and "in time" in answer["error"]
            assert time.monotonic() - start < 0.9  # the idle timeout (0.3 s) fired first
        async with connection() as (handler, reader, writer):
            start = time.monotonic()
            writer.write(b"POST /echo HTTP/1.1\r\nhost: t\r\ncontent-length: 1000\r\n\r\n")

            async def trickle() -> None:
                with contextlib.suppress(ConnectionError):
                    for _ in range(40):  # never idle for 0.3 s
                        writer.write(b" ")
                        await asyncio.sleep(0.1)

            sender = asyncio.create_task(trickle())
            status, _, _ = await read_answer(reader)
            elapsed = time.monotonic() - start
            sender.cancel()
            assert status == 408 and 0.9 < elapsed < 2.5  # the request timeout (1 s), not the idle one
            assert handler.seen == []

    asyncio.run(scenario())


def test_a_silent_connection_is_closed_without_an_answer():
    async def scenario() -> None:
        async with connection() as (_, reader, _writer):
            assert 0.2 < await closed_within(reader, 5) < 1.5
        async with connection() as (_, reader, writer):  # headers that never complete
            writer.write(b"GET /echo HTTP/1.1\r\nhost: t\r\n")
            assert await closed_within(reader, 5) < 1.5
        async with connection() as (_, reader, writer):  # idle after a served request
            writer.write(request("GET", "/echo"))
            assert (await read_answer(reader))[0] == 201
            assert 0.2 < await closed_within(reader, 5) < 1.5

    asyncio.run(scenario())


@pytest.mark.parametrize(
    ("raw", "status"),
    [
        (b"NOT AN HTTP REQUEST\r\n\r\n", 400),
        (b"GET /echo HTTP/1.1\r\n\r\n", 400),  # HTTP/1.1 without a host header
        (b"POST /echo HTTP/1.1\r\nhost: t\r\ncontent-length: ten\r\n\r\n", 400),
        (b"GET /echo HTTP/1.1\r\nhost: t\r\nx-big: " + b"a" * (2 << 20) + b"\r\n\r\n", 431),
    ],
    ids=["request-line", "no-host", "bad-length", "huge-headers"],
)
def test_malformed_http_gets_its_4xx_and_a_close(raw, status):
    async def scenario() -> None:
        async with connection() as (handler, reader, writer):
            writer.write(raw)
            got, headers, answer = await read_answer(reader)
            assert got == status and headers["connection"] == "close"
            assert answer["error"].startswith("bad HTTP request")
            assert await closed_within(reader, 5) < 1
            assert handler.seen == []

    asyncio.run(scenario())


def test_a_handler_that_raises_is_500_and_the_connection_keeps_serving(caplog):
    async def scenario() -> None:
        async with connection() as (handler, reader, writer):
            for path in ("/boom", "/unencodable"):
                writer.write(request("POST", path, b"{}"))
                status, headers, answer = await read_answer(reader)
                assert status == 500 and "connection" not in headers
                assert answer["error"].startswith(("RuntimeError: kaput", "TypeError: "))
            writer.write(request("GET", "/busy"))
            status, headers, _ = await read_answer(reader)
            assert status == 429 and headers["retry-after"] == "1"
            writer.write(request("GET", "/after"))
            assert (await read_answer(reader))[:1] == (201,)
            assert [path for _, path, _ in handler.seen] == ["/boom", "/unencodable", "/busy", "/after"]

    with caplog.at_level(logging.ERROR, logger="cascade_envs.http_server"):
        asyncio.run(scenario())
    assert [r.getMessage() for r in caplog.records] == ["POST /boom failed", "POST /unencodable failed"]


@pytest.mark.parametrize("field", ["max_body_mb", "idle_timeout_s", "request_timeout_s"])
@pytest.mark.parametrize("value", [0, -1, float("nan"), float("inf"), True, "8"])
def test_limits_must_be_positive_finite_numbers(field, value):
    with pytest.raises(ValueError, match=field):
        Limits(**{field: value})
    assert Limits(**{field: 0.5}).max_body == (1 << 19 if field == "max_body_mb" else 8 << 20)
