"""Worker processes for CPU-bound work: a hard per-call timeout, a memory cap, crash detection.

``WorkerPool`` keeps up to ``workers`` processes warm and runs one call at a time in each. Why not
``concurrent.futures.ProcessPoolExecutor``: it cannot stop one hung call; killing a worker breaks
the whole executor and every call in flight with it. Here a call takes an idle worker (or waits
for a free one), writes its arguments to that worker's socket and reads the reply with the
calling event loop's non-blocking socket I/O under ``asyncio.timeout``: the loop never blocks and
no thread hop is paid per call. A call that overruns kills only its own worker (a fresh one starts
on the next call) and raises ``CallTimeout``; a worker that dies raises ``WorkerDied``; a function
that raises gives ``CallFailed``; a cancelled call kills its worker. Calls may come from any
thread and event loop, and run in the worker's main thread, so ``signal.alarm`` works there.

Workers are fresh interpreters (``python -c``, see ``_worker_main``), not ``multiprocessing``
children: nothing is forked from a threaded parent and the caller's ``__main__`` is never
re-imported. Functions travel by reference, so they must be importable top-level functions; the
modules of the pool's function and of ``preload`` are imported before a worker reports ready, so
start-up never counts against a call's timeout. Workers start on first use (from one helper thread
owned by the pool), are reused, and die with the pool (``close``/``aclose``, garbage collection,
interpreter exit) or with that thread (Linux ``PR_SET_PDEATHSIG``). POSIX only. A pool inherited
across ``fork`` starts afresh in the child.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import threading
import weakref
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ._worker_process import WorkerProcess as _Worker
from ._worker_process import frame, target_name

STARTUP_TIMEOUT_S = 120.0

__all__ = ["CallFailed", "CallTimeout", "WorkerDied", "WorkerError", "WorkerPool", "target_name"]


class WorkerError(Exception):
    """Base of the errors a ``WorkerPool`` call raises."""


class CallTimeout(WorkerError):
    """The call ran past its timeout; its worker was killed (and is replaced on the next call)."""


class WorkerDied(WorkerError):
    """The worker exited (crash, out of memory, killed, pool closed) before answering."""


class CallFailed(WorkerError):
    """The function raised in the worker: ``kind`` is the exception's class name, ``detail`` its message."""

    def __init__(self, kind: str, detail: str):
        super().__init__(f"{kind}: {detail}")
        self.kind, self.detail = kind, detail


def _stop_all(workers: list[_Worker], owner: int) -> None:
    if os.getpid() == owner:  # a forked child must not kill its parent's workers
        for worker in list(workers):
            worker.stop()


def _fail(waiter: asyncio.Future[Any], exc: BaseException) -> None:
    if not waiter.done():
        waiter.set_exception(exc)


class WorkerPool:
    """Up to ``workers`` warm processes; ``call`` runs ``fn``, ``run`` any top-level function.

    ``timeout_s`` bounds each call (wall clock, overridable per call); ``memory_mb`` caps each
    worker's address space (``RLIMIT_AS``); ``preload``: more functions whose modules a worker
    imports at start-up; ``initializer``: a top-level function each worker calls once at start-up
    (to warm caches; if it raises, the worker does not start). Nothing starts until the first
    call; after ``close`` a later call starts new workers.
    """

    def __init__(
        self,
        fn: Callable[..., Any] | None = None,
        workers: int = 1,
        timeout_s: float = 10.0,
        memory_mb: int | None = None,
        *,
        preload: Sequence[Callable[..., Any]] = (),
        initializer: Callable[[], Any] | None = None,
    ):
        if workers < 1:
            raise ValueError("workers must be at least 1")
        if timeout_s <= 0:
            raise ValueError("timeout_s must be positive")
        self.fn = fn
        self.workers, self.timeout_s, self.memory_mb = int(workers), float(timeout_s), memory_mb
        self._targets = {
            "fn": target_name(fn) if fn else "",
            "init": target_name(initializer) if initializer else "",
            "preload": [target_name(f) for f in preload],
        }
        self._lock = threading.Lock()
        self._reset()

    def _reset(self) -> None:
        self._pid = os.getpid()
        self._generation = 0  # bumped by close(): workers and slots of older generations are void
        self._free = self.workers  # slots without a worker
        self._idle: list[_Worker] = []
        self._live: list[_Worker] = []  # every started worker: idle, busy or starting
        self._waiters: deque[tuple[asyncio.AbstractEventLoop, asyncio.Future[_Worker | None]]] = deque()
        self._helper: ThreadPoolExecutor | None = None  # starts workers
        self._finalizer = weakref.finalize(self, _stop_all, self._live, self._pid)

    @property
    def live_workers(self) -> int:
        """How many worker processes are running now."""
        with self._lock:
            return sum(w.alive() for w in self._live)

    async def call(self, *args: Any, timeout_s: float | None = None) -> Any:
        """``fn(*args)`` in a worker; raises ``CallTimeout``, ``WorkerDied`` or ``CallFailed``."""
        if self.fn is None:
            raise TypeError("this pool has no default function; use run(fn, *args)")
        return await self._submit(None, args, timeout_s)

    async def run(self, fn: Callable[..., Any], *args: Any, timeout_s: float | None = None) -> Any:
        """``fn(*args)`` in a worker, for any importable top-level ``fn``; raises like ``call``."""
        target_name(fn)
        return await self._submit(fn, args, timeout_s)

    async def _submit(
        self, fn: Callable[..., Any] | None, args: tuple[Any, ...], timeout_s: float | None
    ) -> Any:
        limit = self.timeout_s if timeout_s is None else float(timeout_s)
        if limit <= 0:
            raise ValueError("timeout_s must be positive")
        data = frame(fn, args)
        with self._lock:
            if self._pid != os.getpid():  # inherited through fork: the workers are the parent's
                self._finalizer.detach()
                self._reset()
            generation = self._generation
        worker = await self._acquire(generation)
        try:
            status, value = await worker.request(data, limit)
        except BaseException as exc:
            code = await self._retire(worker, generation, reap=not isinstance(exc, asyncio.CancelledError))
            if isinstance(exc, TimeoutError):
                raise CallTimeout(f"no answer within {limit:g} s") from None
            if isinstance(exc, EOFError):
                raise self._died(generation, f"worker process died (exit code {code})") from None
            raise
        self._release(worker, generation)
        if status == "error":
            raise CallFailed(*value)
        return value

    def _died(self, generation: int, message: str) -> WorkerDied:
        return WorkerDied("the worker pool was closed" if generation != self._generation else message)

    # ----- slots: a call holds one, and the slot's worker once started ------------------------

    async def _acquire(self, generation: int) -> _Worker:
        loop = asyncio.get_running_loop()
        with self._lock:
            if generation != self._generation:
                raise self._died(generation, "")
            waiter: asyncio.Future[_Worker | None] | None = None
            grant: _Worker | None = None
            if self._idle:
                grant = self._idle.pop()
            elif self._free:
                self._free -= 1
            else:
                waiter = loop.create_future()
                self._waiters.append((loop, waiter))
        if waiter is not None:
            try:
                grant = await waiter
            except asyncio.CancelledError:
                if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                    self._release(waiter.result(), generation)  # granted, then cancelled: pass it on
                raise
        if grant is not None and grant.alive():
            return grant
        if grant is not None:  # died while idle: start a new one in its slot
            await self._retire(grant, generation, reap=True, release=False)
        try:
            return await self._start_worker(generation)
        except BaseException:
            self._release(None, generation)
            raise

    def _release(self, worker: _Worker | None, generation: int) -> None:
        """Hand a slot (with its worker, if alive) to the next waiter, or keep it."""
        try:
            here: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            here = None
        dead = None
        with self._lock:
            if worker is not None and (generation != self._generation or not worker.alive()):
                dead, worker = worker, None
                if dead in self._live:
                    self._live.remove(dead)
            if generation == self._generation:
                while self._waiters:
                    loop, waiter = self._waiters.popleft()
                    if loop is here:
                        if waiter.done():
                            continue
                        waiter.set_result(worker)
                        break
                    with contextlib.suppress(RuntimeError):  # RuntimeError: that loop is closed
                        loop.call_soon_threadsafe(self._deliver, waiter, worker, generation)
                        break
                else:
                    if worker is None:
                        self._free += 1
                    else:
                        self._idle.append(worker)
        if dead is not None:
            dead.kill()
            threading.Thread(target=dead.stop, daemon=True).start()

    def _deliver(
        self, waiter: asyncio.Future[_Worker | None], worker: _Worker | None, generation: int
    ) -> None:
        """A grant from another thread, on the waiter's own loop."""
        if waiter.done():
            self._release(worker, generation)
        else:
            waiter.set_result(worker)

    async def _start_worker(self, generation: int) -> _Worker:
        def start() -> _Worker:
            try:
                worker = _Worker(self._targets, self.memory_mb)
            except OSError as exc:
                raise WorkerDied(f"worker process failed to start: {exc}") from exc
            with self._lock:
                if generation == self._generation:
                    self._live.append(worker)  # registered before start-up, so close() stops it
                    return worker
            worker.stop()
            raise self._died(generation, "")

        with self._lock:  # workers die with the thread that started them: one long-lived thread
            if self._helper is None:
                self._helper = ThreadPoolExecutor(1, thread_name_prefix="cascade-workers")
            helper = self._helper
        started = asyncio.get_running_loop().run_in_executor(helper, start)
        try:
            worker = await asyncio.shield(started)
        except asyncio.CancelledError:
            started.add_done_callback(self._discard_started)
            raise
        try:
            async with asyncio.timeout(STARTUP_TIMEOUT_S):
                ready = (await worker.receive())[0] == "ready"
        except (EOFError, OSError):  # TimeoutError is an OSError
            ready = False
        except BaseException:
            await self._retire(worker, generation, reap=False, release=False)
            raise
        if not ready:
            code = await self._retire(worker, generation, reap=True, release=False)
            raise self._died(generation, f"worker did not start (exit code {code})")
        return worker

    def _discard_started(self, started: asyncio.Future[_Worker]) -> None:
        """A worker started for a call that was cancelled meanwhile."""
        if not started.cancelled() and started.exception() is None:
            self._discard(started.result())

    def _discard(self, worker: _Worker) -> None:
        with self._lock:
            if worker in self._live:
                self._live.remove(worker)
        worker.stop()

    async def _retire(
        self, worker: _Worker, generation: int, *, reap: bool, release: bool = True
    ) -> int | None:
        """Kill a worker (its state is unknown), free its slot, reap it off the event loop."""
        worker.kill()
        with self._lock:
            if worker in self._live:
                self._live.remove(worker)
        if release:
            self._release(None, generation)
        if not reap:  # cancelled: do not wait
            threading.Thread(target=worker.stop, daemon=True).start()
            return None
        return await asyncio.to_thread(worker.stop)

    # ----- closing ----------------------------------------------------------------------------

    def close(self) -> None:
        """Stop every worker and reap it before returning; calls in flight raise ``WorkerDied``."""
        with self._lock:
            if self._pid != os.getpid():
                return
            self._generation += 1
            workers, idle, waiters = list(self._live), list(self._idle), list(self._waiters)
            helper, self._helper = self._helper, None
            self._live.clear()
            self._idle.clear()
            self._waiters.clear()
            self._free = self.workers
        for loop, waiter in waiters:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_fail, waiter, WorkerDied("the worker pool was closed"))
        for worker in workers:
            worker.kill()
        for worker in workers:
            if worker in idle:
                worker.stop()
            else:  # busy or starting: reap it; the call that holds it closes its socket
                with contextlib.suppress(subprocess.TimeoutExpired):
                    worker.process.wait(timeout=5)
        if helper is not None:
            helper.shutdown(wait=False)

    async def aclose(self) -> None:
        """``close`` without blocking the event loop."""
        await asyncio.to_thread(self.close)
