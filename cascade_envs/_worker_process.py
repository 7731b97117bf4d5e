"""One worker process of ``cascade_envs.workers``: the loop it runs (``serve``) and our handle on it.

A worker is a fresh interpreter started as ``python -c`` with its arguments on the command line;
it imports its functions, applies its limits, says it is ready, then answers one call at a time
over a socket pair, in ``multiprocessing.Connection`` framing (a 4-byte length, then a pickle).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import os
import pickle
import socket
import struct
import subprocess
import sys
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

_BOOT = "import sys, json; sys.path[:] = json.loads(sys.argv[1]); from {module} import serve; serve()"
_HEADER = struct.Struct("!i")
_CHUNK = 65536


def target_name(fn: Callable[..., Any]) -> str:
    """``module:qualname`` of an importable top-level function; raises ``ValueError`` otherwise."""
    module, qualname = getattr(fn, "__module__", None), getattr(fn, "__qualname__", "")
    if not module or not qualname or "<" in qualname or module == "__main__":
        raise ValueError(f"{fn!r} is not an importable top-level function")
    return f"{module}:{qualname}"


def resolve(target: str) -> Callable[..., Any]:
    """The function named by ``target_name``."""
    module, _, qualname = target.partition(":")
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def frame(fn: Callable[..., Any] | None, args: tuple[Any, ...]) -> bytes:
    """A call as the worker reads it: ``(fn, args)`` pickled (``fn`` None: the default function)."""
    data = pickle.dumps((fn, args), pickle.HIGHEST_PROTOCOL)
    if len(data) >= 0x7FFFFFFF:
        raise ValueError("call arguments over 2 GiB")
    return _HEADER.pack(len(data)) + data


# ----- the worker's side ------------------------------------------------------------------------


def _die_with_parent(parent: int) -> None:
    """Ask Linux to SIGKILL this process when its starting thread ends (even mid C code)."""
    if sys.platform.startswith("linux"):
        import ctypes
        import signal

        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:
        os._exit(1)


def serve() -> None:
    """Worker main loop; ``argv``: sys.path, socket fd, JSON targets, memory cap MB, parent pid.

    The targets are ``{"fn": default function, "init": initializer, "preload": [...]}`` (names
    may be empty): all are imported and the initializer called before the worker says ready.
    Then it receives pickled ``(fn, args)`` and sends ``("ok", result)`` or ``("error", (kind, message))``.
    """
    import resource
    import signal

    fd, targets, memory_mb, parent = (
        int(sys.argv[2]),
        json.loads(sys.argv[3]),
        int(sys.argv[4]),
        int(sys.argv[5]),
    )
    _die_with_parent(parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    default = resolve(targets["fn"]) if targets["fn"] else None
    for name in targets["preload"]:
        resolve(name)
    if targets["init"]:
        resolve(targets["init"])()
    conn = Connection(fd)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if memory_mb:
        limit = memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    conn.send_bytes(pickle.dumps(("ready", None)))
    while True:
        try:
            data = conn.recv_bytes()
        except (EOFError, OSError):
            return
        try:
            fn, args = pickle.loads(data)
            call = fn or default
            if call is None:
                raise TypeError("no function to call")
            reply = pickle.dumps(("ok", call(*args)), pickle.HIGHEST_PROTOCOL)
        except BaseException as exc:  # report everything: some libraries' timeouts are BaseExceptions
            reply = pickle.dumps(("error", (type(exc).__name__, str(exc)[:500])))
        conn.send_bytes(reply)


# ----- our side ---------------------------------------------------------------------------------


class WorkerProcess:
    """A started worker and our non-blocking end of its socket (used by one call at a time).

    ``receive``/``request`` raise ``EOFError`` when the worker is gone and ``TimeoutError`` (after
    killing it) when it does not answer in time. Starting raises ``OSError``.
    """

    def __init__(self, targets: dict[str, Any], memory_mb: int | None):
        ours, theirs = socket.socketpair()
        argv = [
            json.dumps(sys.path),
            str(theirs.fileno()),
            json.dumps(targets),
            str(memory_mb or 0),
            str(os.getpid()),
        ]
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-c", _BOOT.format(module=__name__), *argv],
                pass_fds=[theirs.fileno()],
                stdin=subprocess.DEVNULL,
            )
        except OSError:
            ours.close()
            raise
        finally:
            theirs.close()
        ours.setblocking(False)
        self.sock = ours

    async def receive(self) -> Any:
        """One framed, pickled message."""
        loop = asyncio.get_running_loop()
        data, size = bytearray(), -1
        while size < 0 or len(data) < _HEADER.size + size:
            try:
                chunk = await loop.sock_recv(self.sock, max(_CHUNK, _HEADER.size + size - len(data)))
            except OSError as exc:
                raise EOFError(str(exc)) from exc
            if not chunk:
                raise EOFError("the worker closed its socket")
            data += chunk
            if size < 0 and len(data) >= _HEADER.size:
                size = _HEADER.unpack_from(data)[0]
                if size < 0:
                    raise EOFError("reply over 2 GiB")
        return pickle.loads(memoryview(data)[_HEADER.size :])

    async def request(self, data: bytes, timeout_s: float) -> tuple[str, Any]:
        """Send one ``frame``d call and read the reply within ``timeout_s``."""
        try:
            async with asyncio.timeout(timeout_s):
                try:
                    await asyncio.get_running_loop().sock_sendall(self.sock, data)
                except OSError as exc:
                    raise EOFError(str(exc)) from exc
                return await self.receive()
        except TimeoutError:
            self.kill()
            raise

    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()

    def stop(self) -> int | None:
        """Kill, reap (blocks briefly) and close the socket; returns the exit code."""
        self.kill()
        try:
            code = self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            code = None
        self.sock.close()
        return code
