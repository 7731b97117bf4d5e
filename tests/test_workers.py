"""cascade_envs.workers and cascade_envs.verifier_pool: hard timeouts, crashes, limits, closing."""

from __future__ import annotations

import asyncio
import gc
import math
import multiprocessing
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from cascade_envs.env import run_sync
from cascade_envs.verifier_pool import VerifierLimit, VerifierPool
from cascade_envs.workers import CallFailed, CallTimeout, WorkerDied, WorkerPool

ROOT = Path(__file__).resolve().parents[1]


# Top-level, so workers can import them (functions travel by reference).
def nap(seconds: float) -> int:
    time.sleep(seconds)
    return os.getpid()


def slow_start() -> None:
    time.sleep(1.5)


def failing_start() -> None:
    raise RuntimeError("no model")


def alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie, i.e. dead but not reaped, counts as alive here)."""
    return Path(f"/proc/{pid}").exists()


def gone(pids: list[int], within_s: float = 5.0) -> bool:
    deadline = time.monotonic() + within_s
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not any(alive(pid) for pid in pids)


def call_all(pool: WorkerPool, *delays: float) -> list[int]:
    """Run ``nap`` concurrently for each delay; the worker pids."""

    async def together():
        return await asyncio.gather(*(pool.call(d) for d in delays))

    return run_sync(together())


@pytest.fixture
def pool():
    pool = WorkerPool(nap, workers=2, timeout_s=1.0)
    yield pool
    pool.close()


# ----- calls, timeouts, crashes ------------------------------------------------------------------


def test_a_timeout_kills_only_its_own_worker_and_a_fresh_one_replaces_it(pool: WorkerPool):
    async def both():
        slow = asyncio.ensure_future(pool.call(30))
        await asyncio.sleep(0.3)  # the slow call has its worker
        fast = await pool.call(0.01)
        with pytest.raises(CallTimeout, match="no answer within 1 s"):
            await slow
        return fast

    first = run_sync(pool.call(0))
    start = time.perf_counter()
    fast_pid = run_sync(both())
    assert time.perf_counter() - start < 5
    pids = set(call_all(pool, 0.2, 0.2))
    assert fast_pid in pids and len(pids) == 2 and pool.live_workers == 2
    assert first in pids or gone([first])  # one of the two first workers was killed for the overrun


def test_workers_are_warm_and_bounded(pool: WorkerPool):
    call_all(pool, 0, 0)
    start = time.perf_counter()
    pids = call_all(pool, *[0.2] * 6)
    assert 0.55 < time.perf_counter() - start < 5  # two at a time
    assert len(set(pids)) == 2 and pool.live_workers == 2
    assert set(call_all(pool, *[0.2] * 6)) == set(pids)  # reused, not restarted


def test_crash_gives_worker_died_and_an_exception_gives_call_failed():
    pool = WorkerPool(workers=1, timeout_s=5)
    try:
        with pytest.raises(WorkerDied, match="exit code 3"):
            run_sync(pool.run(os._exit, 3))
        with pytest.raises(CallFailed, match="ValueError: math domain error") as info:
            run_sync(pool.run(math.sqrt, -1.0))
        assert info.value.kind == "ValueError" and info.value.detail == "math domain error"
        assert run_sync(pool.run(math.sqrt, 4.0)) == 2.0
        with pytest.raises(TypeError):
            run_sync(pool.call(1))  # no default function
    finally:
        pool.close()


def test_memory_cap_is_enforced_in_the_worker():
    pool = WorkerPool(workers=1, timeout_s=10, memory_mb=1024)
    try:
        with pytest.raises((CallFailed, WorkerDied), match=r"MemoryError|died"):
            run_sync(pool.run(bytearray, 3 << 30))
        assert run_sync(pool.run(math.sqrt, 9.0)) == 3.0
    finally:
        pool.close()


def test_start_up_never_counts_against_the_timeout():
    pool = WorkerPool(nap, workers=1, timeout_s=1.0, initializer=slow_start)
    try:
        assert run_sync(pool.call(0)) > 0
    finally:
        pool.close()
    broken = WorkerPool(nap, workers=1, timeout_s=1.0, initializer=failing_start)
    try:
        with pytest.raises(WorkerDied, match="did not start"):
            run_sync(broken.call(0))
    finally:
        broken.close()


def test_cancelling_a_call_kills_its_worker(pool: WorkerPool):
    async def cancelled() -> int:
        pid = await pool.call(0)
        task = asyncio.ensure_future(pool.call(0.9))
        await asyncio.sleep(0.2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return pid

    pid = run_sync(cancelled())
    assert gone([pid]) or pool.live_workers <= 2
    assert run_sync(pool.call(0)) > 0


def test_calls_from_many_threads_and_event_loops(pool: WorkerPool):
    results: list[int] = []

    def worker():
        results.append(run_sync(pool.call(0)))
        results.append(asyncio.run(pool.call(0)))

    threads = [threading.Thread(target=worker) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 6 and len(set(results)) <= 2


def test_arguments_are_checked():
    with pytest.raises(ValueError):
        WorkerPool(nap, workers=0)
    with pytest.raises(ValueError):
        WorkerPool(nap, timeout_s=0)
    with pytest.raises(ValueError, match="top-level"):
        WorkerPool(lambda: None)
    with pytest.raises(ValueError, match="top-level"):
        run_sync(WorkerPool().run(lambda: None))


# ----- closing ------------------------------------------------------------------------------------


def test_close_stops_every_worker_and_a_later_call_starts_afresh(pool: WorkerPool):
    pids = set(call_all(pool, 0.2, 0.2))
    assert all(alive(pid) for pid in pids)
    pool.close()
    assert not any(alive(pid) for pid in pids)  # killed and reaped before close() returns
    assert pool.live_workers == 0
    assert not multiprocessing.active_children()
    assert run_sync(pool.call(0)) not in pids


def test_close_during_calls_fails_them_and_leaves_no_process(pool: WorkerPool):
    async def scenario():
        calls = [asyncio.ensure_future(pool.call(0.8)) for _ in range(4)]  # two running, two waiting
        await asyncio.sleep(0.3)
        pids = [w.process.pid for w in pool._live]
        await pool.aclose()
        results = await asyncio.gather(*calls, return_exceptions=True)
        return pids, results

    pids, results = run_sync(scenario())
    assert len(pids) == 2 and not any(alive(pid) for pid in pids)
    assert all(isinstance(r, WorkerDied) and "closed" in str(r) for r in results), results


def test_psutil_sees_no_child_left(pool: WorkerPool):
    psutil = pytest.importorskip("psutil")
    pids = set(call_all(pool, 0.1, 0.1))
    children = {p.pid for p in psutil.Process().children(recursive=True)}
    assert pids <= children
    pool.close()
    assert not pids & {p.pid for p in psutil.Process().children(recursive=True)}


def test_a_dropped_pool_stops_its_workers():
    pool = WorkerPool(nap, workers=1, timeout_s=5)
    pid = run_sync(pool.call(0))
    del pool
    gc.collect()
    assert gone([pid])


def test_workers_die_with_their_parent_even_mid_call(tmp_path: Path):
    script = tmp_path / "parent.py"
    script.write_text(
        textwrap.dedent(f"""
        import asyncio, os, sys
        sys.path.insert(0, {str(ROOT)!r})
        from cascade_envs.workers import WorkerPool
        from tests.test_workers import nap

        async def main():
            pool = WorkerPool(nap, workers=1, timeout_s=600)
            print(await pool.call(0), flush=True)
            await pool.call(600)

        asyncio.run(main())
    """)
    )
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    try:
        worker_pid = int(parent.stdout.readline())
        time.sleep(0.3)
        assert alive(worker_pid)
    finally:
        parent.kill()
        parent.wait()
    assert gone([worker_pid])


# ----- VerifierPool -------------------------------------------------------------------------------


def test_verifier_pool_limits_and_inline_runs():
    verifier = VerifierPool(timeout_s=1.0, max_chars=10, workers=1, preload=(nap,))
    try:
        assert verifier._pool is None  # nothing started yet
        assert run_sync(verifier.run(nap, 0, inline=True)) == os.getpid()
        assert verifier._pool is None
        assert run_sync(verifier.run(nap, 0)) != os.getpid()
        with pytest.raises(VerifierLimit, match=r"^verifier limit: the check took over 1 s$") as info:
            run_sync(verifier.run(nap, 30))
        assert info.value.kind == "time"
        assert run_sync(verifier.run(nap, 0, timeout_s=5)) > 0
        verifier.check_size("x" * 10)
        with pytest.raises(VerifierLimit, match="answer has 11 characters, over the 10 checked") as info:
            verifier.check_size("x" * 11)
        assert info.value.kind == "size"
    finally:
        pid = run_sync(verifier.run(nap, 0))
        run_sync(verifier.aclose())
    assert not alive(pid)
    with pytest.raises(ValueError):
        VerifierPool(timeout_s=0)
