"""A small pool of worker processes that run one call at a time each, under a hard timeout.

Why not ``concurrent.futures.ProcessPoolExecutor``: it cannot stop one hung call. Killing a
worker breaks the whole executor and every other call in flight with it. Here each worker
process belongs to one thread of a thread pool (as many threads as workers); a call sends its
arguments over the worker's socket and waits with ``poll(timeout)``. A call that overruns kills
only its own worker (a fresh one starts on the next call) and raises ``CallTimeout``; a worker
that dies raises ``WorkerDied``. Calls are awaitable from any event loop, and run in the worker's
main thread, so libraries that rely on ``signal.alarm`` (math-verify) work there.

Workers are fresh interpreters (``python -c``, the function named by module and attribute), not
``multiprocessing`` children: nothing is forked from a threaded parent, and the caller's
``__main__`` is never re-imported, so scripts need no ``if __name__ == "__main__"`` guard.
Start-up (importing the function's module) happens before the first call and never counts
against its timeout. POSIX only. The pool notices when it was inherited across a ``fork`` and
starts afresh in the child.
"""

from __future__ import annotations

import asyncio
import atexit
import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.connection import Connection
from typing import Any

from cascade_envs.shared import shared

STARTUP_TIMEOUT_S = 120
_BOOT = "import sys, json; sys.path[:] = json.loads(sys.argv[1]); from {module} import serve; serve()"


class CallTimeout(Exception):
    """The call ran past the pool's timeout; its worker was killed."""


class WorkerDied(Exception):
    """The worker process exited (crash, out of memory, killed) before answering."""


class CallFailed(Exception):
    """The function raised in the worker; the message names the original exception."""


def serve() -> None:
    """Worker main loop (``argv``: sys.path, socket fd, ``module:function``, memory cap in MB).

    Receives argument tuples and sends back ``("ok", result)`` or ``("error", message)``.
    """
    import importlib

    fd, target, memory_mb = int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    module, _, name = target.partition(":")
    fn = getattr(importlib.import_module(module), name)
    conn = Connection(fd)
    if memory_mb:
        import resource

        limit = memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    while True:
        try:
            args = conn.recv()
        except (EOFError, OSError):
            return
        if args is None:  # readiness probe
            conn.send(("ready", None))
            continue
        try:
            reply: tuple[str, Any] = ("ok", fn(*args))
        except BaseException as exc:  # report everything: math-verify's timeouts are BaseExceptions
            reply = ("error", f"{type(exc).__name__}: {str(exc)[:300]}")
        conn.send(reply)


class _Worker:
    def __init__(self, target: str, memory_mb: int | None):
        ours, theirs = socket.socketpair()
        argv = [json.dumps(sys.path), str(theirs.fileno()), target, str(memory_mb or 0)]
        boot = _BOOT.format(module=__name__)
        self.process = subprocess.Popen([sys.executable, "-c", boot, *argv], pass_fds=[theirs.fileno()])
        theirs.close()
        self.conn = Connection(ours.detach())
        # Wait until the worker has imported its function, so start-up never counts as a call.
        try:
            self.conn.send(None)
            ready = self.conn.poll(STARTUP_TIMEOUT_S)
            ready = ready and self.conn.recv()[0] == "ready"
        except (EOFError, OSError):
            ready = False
        if not ready:
            self.stop()
            raise WorkerDied(f"worker did not start (exit code {self.process.poll()})")

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> None:
        self.conn.close()
        if self.alive():
            self.process.kill()
        self.process.wait(timeout=5)


class WorkerPool:
    """``workers`` processes running ``fn`` (a module-level function), ``timeout_s`` per call."""

    def __init__(self, fn: Callable[..., Any], workers: int = 1, timeout_s: float = 10.0, memory_mb: int | None = None):
        if workers < 1:
            raise ValueError("workers must be at least 1")
        if timeout_s <= 0:
            raise ValueError("timeout_s must be positive")
        self.target = f"{fn.__module__}:{fn.__qualname__}"
        self.workers, self.timeout_s, self.memory_mb = workers, timeout_s, memory_mb
        self._lock = threading.Lock()
        self._start()
        atexit.register(self.close)

    def _start(self) -> None:
        self._pid = os.getpid()
        self._threads = ThreadPoolExecutor(self.workers, thread_name_prefix="cascade-verifier")
        self._local = threading.local()
        self._all: list[_Worker] = []

    async def call(self, *args: Any) -> Any:
        """Run ``fn(*args)`` in a worker; raises ``CallTimeout``, ``WorkerDied`` or ``CallFailed``."""
        with self._lock:
            if self._pid != os.getpid():  # inherited through fork: the threads and sockets are not ours
                self._start()
            threads = self._threads
        return await asyncio.get_running_loop().run_in_executor(threads, self._run, args)

    def _worker(self) -> _Worker:
        worker: _Worker | None = getattr(self._local, "worker", None)
        if worker is None or not worker.alive():
            if worker is not None:
                self._retire(worker)
            try:
                worker = _Worker(self.target, self.memory_mb)
            except OSError as exc:
                raise WorkerDied(f"worker process failed to start: {exc}") from exc
            self._local.worker = worker
            with self._lock:
                self._all.append(worker)
        return worker

    def _retire(self, worker: _Worker) -> None:
        worker.stop()
        self._local.worker = None
        with self._lock:
            if worker in self._all:
                self._all.remove(worker)

    def _run(self, args: tuple[Any, ...]) -> Any:
        worker = self._worker()
        try:
            worker.conn.send(args)
            if not worker.conn.poll(self.timeout_s):
                self._retire(worker)
                raise CallTimeout(f"no answer within {self.timeout_s:g} s")
            status, value = worker.conn.recv()
        except (EOFError, OSError) as exc:
            self._retire(worker)
            raise WorkerDied(f"worker process died (exit code {worker.process.returncode})") from exc
        if status == "error":
            raise CallFailed(value)
        return value

    def close(self) -> None:
        """Stop every worker; a later ``call`` starts new ones."""
        with self._lock:
            workers, self._all = self._all, []
            threads = self._threads
            self._start()
        threads.shutdown(wait=False, cancel_futures=True)
        for worker in workers:
            worker.stop()


def shared_pool(fn: Callable[..., Any], workers: int, timeout_s: float, memory_mb: int | None) -> WorkerPool:
    """One pool per (function, size, timeout, memory cap) in the process, so envs share workers."""
    key = (fn, workers, timeout_s, memory_mb)
    return shared("math.worker_pool", key, lambda: WorkerPool(fn, workers, timeout_s, memory_mb))
