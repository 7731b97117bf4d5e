"""The worker-process side of ``cascade_envs.workers``: the loop each worker interpreter runs.

A worker is started as ``python -c`` with its arguments on the command line (see ``serve``); it
imports its functions, applies its limits, says it is ready and then answers one call at a time.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import pickle
import sys
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

BOOT = "import sys, json; sys.path[:] = json.loads(sys.argv[1]); from {module} import serve; serve()"


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
    """Worker main loop; ``argv``: sys.path, socket fd, JSON list of targets, memory cap MB, parent pid.

    The first target (may be empty) is the default function. Receives pickled ``(fn, args)``
    (``fn`` None for the default) and sends back ``("ok", result)`` or ``("error", (kind, message))``.
    """
    import resource
    import signal

    fd, targets, memory_mb, parent = int(sys.argv[2]), json.loads(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    _die_with_parent(parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    fns = [resolve(t) if t else None for t in targets]
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
            reply = pickle.dumps(("ok", (fn or fns[0])(*args)), pickle.HIGHEST_PROTOCOL)
        except BaseException as exc:  # report everything: some libraries' timeouts are BaseExceptions
            reply = pickle.dumps(("error", (type(exc).__name__, str(exc)[:500])))
        conn.send_bytes(reply)
