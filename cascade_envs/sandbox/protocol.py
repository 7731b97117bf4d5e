"""The host side of the agent protocol (see ``agent.py``).

Requests are length-prefixed ``marshal`` data (host to sandbox only; ``marshal`` version 4 reads
the same on every Python 3 the sandbox may run). Answers are parsed with ``struct`` alone: a kind
byte, then fixed fields and length-prefixed byte strings, each checked against a size limit, so a
compromised sandbox can at worst send garbage, which ends the session.
"""

from __future__ import annotations

import asyncio
import marshal
import struct
from typing import Any

from .results import ExecResult, SandboxError

HEAD = struct.Struct("!I")
RESULT = struct.Struct("!idddB")
OK, ERROR, RESULT_KIND = 0, 1, 2
MARSHAL_VERSION = 4


def encode(request: dict[str, Any]) -> bytes:
    body = marshal.dumps(request, MARSHAL_VERSION)
    return HEAD.pack(len(body)) + body


async def _blob(reader: asyncio.StreamReader, limit: int) -> bytes:
    (size,) = HEAD.unpack(await reader.readexactly(HEAD.size))
    if size > limit:
        raise SandboxError(f"agent sent {size} bytes, more than the {limit} allowed")
    return await reader.readexactly(size)


async def read_answer(reader: asyncio.StreamReader, limit: int) -> bytes | ExecResult:
    """One answer: the data of an ``OK``, an ``ExecResult``, or ``SandboxError`` for an ``ERROR``."""
    kind = (await reader.readexactly(1))[0]
    if kind == OK:
        return await _blob(reader, limit)
    if kind == ERROR:
        raise SandboxError("agent error: " + (await _blob(reader, 1 << 16)).decode(errors="replace"))
    if kind != RESULT_KIND:
        raise SandboxError(f"agent sent an unknown answer kind {kind}")
    code, wall, cpu, mem, truncated = RESULT.unpack(await reader.readexactly(RESULT.size))
    killed_by = (await _blob(reader, 256)).decode(errors="replace") or None
    error = (await _blob(reader, 1 << 16)).decode(errors="replace") or None
    stdout, stderr = await _blob(reader, limit), await _blob(reader, limit)
    return ExecResult(code, stdout, stderr, wall, cpu, mem, killed_by, bool(truncated), error)
