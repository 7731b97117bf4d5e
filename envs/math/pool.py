"""A small pool of worker processes that run one call at a time each, under a hard timeout.

Why not ``concurrent.futures.ProcessPoolExecutor``: it cannot stop one hung call. Killing a
worker breaks the whole executor and every other call in flight with it. Here each worker
process belongs to one thread of a thread pool (as many threads as workers); a call sends its
arguments over the worker's pipe and waits with ``poll(timeout)``. A call that overruns kills
only its own worker (a fresh one starts on the next call) and raises ``CallTimeout``; a worker
that dies raises ``WorkerDied``. Calls are awaitable from any event loop, and run in the worker's
main thread, so libraries that rely on ``signal.alarm`` (math-verify) work there.

Workers start with the ``forkserver`` method where available (safe in a threaded parent, and
cheap once the server has imported ``preload``), else ``spawn``. The pool notices when it has
been inherited across a ``fork`` and starts afresh in the child.
"""

from __future__ import annotations

import asyncio
import atexit
import multiprocessing
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any


STARTUP_TIMEOUT_S = 120


class CallTimeout(Exception):
    """The call ran past the pool's timeout; its worker was killed."""


class WorkerDied(Exception):
    """The worker process exited (crash, out of memory, killed) before answering."""


class CallFailed(Exception):
    """The function raised in the worker; the message names the original exception."""


def _serve(conn: Any, fn: Callable[..., Any], memory_mb: int | None) -> None:
    """Worker main loop: receive argument tuples, send back ``("ok", result)`` or ``("error", msg)``."""
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
        except BaseException as exc:  # noqa: BLE001 - report everything, math-verify raises BaseException
            reply = ("error", f"{type(exc).__name__}: {str(exc)[:300]}")
        conn.send(reply)


class _Worker:
    def __init__(self, ctx: Any, fn: Callable[..., Any], memory_mb: int | None):
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_serve, args=(child, fn, memory_mb), daemon=True)
        self.process.start()
        child.close()
        # Wait until the worker has imported ``fn``'s module, so start-up never counts as a call.
        self.conn.send(None)
        if not self.conn.poll(STARTUP_TIMEOUT_S):
            self.stop()
            raise WorkerDied(f"worker did not start within {STARTUP_TIMEOUT_S} s")
        self.conn.recv()

    def stop(self) -> None:
        self.conn.close()
        if self.process.is_alive():
            self.process.kill()
        self.process.join(timeout=5)


class WorkerPool:
    """``workers`` processes running ``fn`` (a module-level function), ``timeout_s`` per call."""

    def __init__(
        self,
        fn: Callable[..., Any],
        workers: int = 1,
        timeout_s: float = 10.0,
        memory_mb: int | None = None,
        preload: Sequence[str] = (),
    ):
        if workers < 1:
            raise ValueError("workers must be at least 1")
        if timeout_s <= 0:
            raise ValueError("timeout_s must be positive")
        self.fn, self.workers, self.timeout_s, self.memory_mb = fn, workers, timeout_s, memory_mb
        method = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
        self._ctx = multiprocessing.get_context(method)
        if method == "forkserver" and preload:
            self._ctx.set_forkserver_preload(list(preload))
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
            if self._pid != os.getpid():  # inherited through fork: the threads and pipes are not ours
                self._start()
            threads = self._threads
        return await asyncio.get_running_loop().run_in_executor(threads, self._run, args)

    def _worker(self) -> _Worker:
        worker: _Worker | None = getattr(self._local, "worker", None)
        if worker is None or not worker.process.is_alive():
            if worker is not None:
                self._retire(worker)
            try:
                worker = _Worker(self._ctx, self.fn, self.memory_mb)
            except (EOFError, OSError) as exc:
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
        except (EOFError, OSError, BrokenPipeError) as exc:
            code = worker.process.exitcode
            self._retire(worker)
            raise WorkerDied(f"worker process died (exit code {code})") from exc
        if status == "error":
            raise CallFailed(value)
        return value

    def close(self) -> None:
        """Stop every worker; a later ``call`` starts new ones."""
        with self._lock:
            workers, self._all = self._all, []
            threads = self._threads
        for worker in workers:
            worker.stop()
        threads.shutdown(wait=False, cancel_futures=True)
        self._start()


_shared: dict[tuple[Any, ...], WorkerPool] = {}
_shared_lock = threading.Lock()


def shared_pool(
    fn: Callable[..., Any], workers: int, timeout_s: float, memory_mb: int | None, preload: Sequence[str] = ()
) -> WorkerPool:
    """One pool per (function, size, timeout, memory cap) in the process, so envs share workers."""
    key = (fn, workers, timeout_s, memory_mb)
    with _shared_lock:
        if key not in _shared:
            _shared[key] = WorkerPool(fn, workers, timeout_s, memory_mb, preload)
        return _shared[key]
