"""The serving core's session store: caps, ids, locks, deadlines, expiry, bounded memory."""

from __future__ import annotations

import asyncio
import gc
import tracemalloc

import pytest

from cascade_envs.serving import (
    BadRequest,
    Conflict,
    DeadlineExceeded,
    Overloaded,
    SessionStore,
    UnknownSession,
)
from tests.toy_envs import ExactAnswerEnv

ROW = {"id": "t1", "prompt": "2+2?", "answer": "4"}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class EndCounter(ExactAnswerEnv):
    """Counts the episodes it released."""

    ended = 0

    async def on_end(self, episode) -> None:
        type(self).ended += 1


def test_cap_ids_and_unknown_sessions():
    async def scenario() -> None:
        store = SessionStore(ExactAnswerEnv(tasks=[ROW]), max_sessions=2)
        a, b = await store.create(), await store.create()
        assert a.id != b.id and len(a.id) >= 20 and len(store) == 2
        with pytest.raises(Overloaded) as over:
            await store.create()
        assert over.value.status == 503 and over.value.retry_after >= 1
        for bad in (None, 7, "", "x" * 200, "../etc/passwd", "a b c d e f g h i j k l"):
            with pytest.raises(BadRequest):
                store.get(bad)
        with pytest.raises(UnknownSession):
            store.get("A" * 22)  # well formed, but no session of ours
        assert await store.close(a.id) and not await store.close(a.id)
        with pytest.raises(UnknownSession):
            store.get(a.id)
        await store.create()  # room again
        await store.aclose()
        assert len(store) == 0

    asyncio.run(scenario())


def test_episodes_end_on_close_and_bad_rows_are_400():
    async def scenario() -> None:
        EndCounter.ended = 0
        store = SessionStore(EndCounter(tasks=[ROW]))
        session = await store.create()
        async with store.use(session.id) as s:
            episode = await store.start_episode(s, ROW)
            assert episode.messages[-1]["content"] == "2+2?"
            await store.start_episode(s, ROW)  # a second reset ends the first episode
        assert EndCounter.ended == 1
        with pytest.raises(BadRequest, match="task row"):
            await store.start_episode(session, {"id": "t2", "prompt": "no answer"})
        with pytest.raises(BadRequest, match="JSON object"):
            await store.start_episode(session, ["not", "a", "row"])  # type: ignore[arg-type]
        await store.close(session.id)
        assert EndCounter.ended == 2

    asyncio.run(scenario())


def test_lock_serialises_and_deadline_breaks_the_session():
    async def scenario() -> None:
        store = SessionStore(ExactAnswerEnv(tasks=[ROW]), request_deadline_s=0.2)
        session = await store.create()
        order: list[str] = []

        async def hold(tag: str, seconds: float) -> None:
            async with store.use(session.id, deadline_s=5):
                order.append(f"{tag}+")
                await asyncio.sleep(seconds)
                order.append(f"{tag}-")

        await asyncio.gather(hold("a", 0.05), hold("b", 0.01))
        assert order == ["a+", "a-", "b+", "b-"]  # never interleaved
        with pytest.raises(DeadlineExceeded, match=r"0\.2 s"):
            async with store.use(session.id):
                await asyncio.sleep(5)
        with pytest.raises(Conflict, match="deadline"):
            async with store.use(session.id):
                pass
        other = await store.create()

        async def hold_other() -> None:
            async with store.use(other.id, deadline_s=5):
                await asyncio.sleep(0.5)

        holder = asyncio.create_task(hold_other())
        await asyncio.sleep(0.01)
        with pytest.raises(DeadlineExceeded, match="busy"):  # waiting for the lock counts too
            async with store.use(other.id, deadline_s=0.05):
                pass
        await holder
        async with store.use(other.id):  # a request that only waited leaves the session usable
            pass
        await store.aclose()

    asyncio.run(scenario())


def test_thousand_sessions_never_closed_stay_bounded_and_expire():
    async def scenario() -> None:
        EndCounter.ended = 0
        clock = Clock()
        store = SessionStore(EndCounter(tasks=[ROW]), max_sessions=100, ttl_s=60, clock=clock)
        tracemalloc.start()
        refused = 0
        for i in range(1000):
            clock.now += 1.0  # a new client each second; none closes its session
            try:
                session = await store.create()
            except Overloaded:
                refused += 1
                continue
            await store.start_episode(session, ROW)
            assert len(store) <= 100
            if i == 499:
                gc.collect()
                middle, _ = tracemalloc.get_traced_memory()
        gc.collect()
        end, _ = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        # 60 s of TTL at one session a second: a full store expires the idle ones, none is refused
        assert refused == 0 and 55 <= len(store) <= 100
        assert store.expired == 1000 - len(store) and EndCounter.ended == store.expired
        assert end - middle < 200_000  # flat: the second 500 sessions left nothing behind
        clock.now += 61
        live = len(store)
        assert await store.sweep() == live and len(store) == 0
        await store.aclose()

    asyncio.run(scenario())


def test_sweeper_runs_on_its_own():
    async def scenario() -> None:
        store = SessionStore(ExactAnswerEnv(tasks=[ROW]), ttl_s=0.1, sweep_s=0.05)
        store.start()
        session = await store.create()
        await asyncio.sleep(0.4)
        assert session.id not in store and store.expired == 1
        await store.aclose()

    asyncio.run(scenario())
