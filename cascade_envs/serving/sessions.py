"""The session store every protocol shares: one env instance, many sessions, each holding an episode.

A session is made by ``create`` (503 ``Overloaded`` past ``max_sessions`` live ones), named by an
unguessable id (``secrets.token_urlsafe``; a malformed id is a ``BadRequest``, an id of no live
session ``UnknownSession``), and used under its own lock and a per-request deadline with
``async with store.use(session_id) as session``. A session unused for ``ttl_s`` expires (the sweeper
checks every ``sweep_s``; ``create`` sweeps too when full): its episode is ended (``Env.aend``) and
it is dropped, so memory stays bounded however many sessions clients open and never close. A request
cut by its deadline breaks its session (``session.broken``: later uses answer 409), since the
episode may be half-advanced.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import secrets
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from ..core import Row, TaskError
from ..env import Env
from ..episode import Episode
from .errors import BadRequest, Conflict, DeadlineExceeded, Overloaded, UnknownSession

log = logging.getLogger("cascade_envs.serving")

MAX_SESSIONS = 256
"""Default cap on live sessions."""
SESSION_TTL_S = 600.0
"""Default: a session unused this long expires."""
REQUEST_DEADLINE_S = 300.0
"""Default deadline of one request on a session (its lock wait included)."""
END_TIMEOUT_S = 30.0
"""Bound on ``Env.aend`` when a session closes or expires."""
_ID = re.compile(r"[A-Za-z0-9_-]{16,64}")


@dataclass(eq=False)
class Session:
    """One client's session: its episode (None before the first reset) and protocol ``state``."""

    id: str
    created: float
    last_used: float
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    episode: Episode | None = None
    state: dict[str, Any] = field(default_factory=dict)
    broken: str | None = None
    """Why the session can no longer be used (a request cut by its deadline), or None."""
    closed: bool = False


class SessionStore:
    """Sessions over one ``env``; see the module docstring. ``clock`` is for tests."""

    def __init__(
        self,
        env: Env,
        *,
        max_sessions: int = MAX_SESSIONS,
        ttl_s: float = SESSION_TTL_S,
        request_deadline_s: float = REQUEST_DEADLINE_S,
        sweep_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        if max_sessions < 1 or ttl_s <= 0 or request_deadline_s <= 0:
            raise ValueError("max_sessions, ttl_s and request_deadline_s must be positive")
        self.env = env
        self.max_sessions = max_sessions
        self.ttl_s = ttl_s
        self.request_deadline_s = request_deadline_s
        self.sweep_s = sweep_s if sweep_s is not None else min(ttl_s / 4, 30.0)
        self.clock = clock
        self._sessions: dict[str, Session] = {}
        self._sweeper: asyncio.Task[None] | None = None
        self.expired = 0
        """Sessions expired so far (for stats and tests)."""

    def __len__(self) -> int:
        return len(self._sessions)

    def __contains__(self, session_id: object) -> bool:
        return session_id in self._sessions

    # ----- lifecycle ----------------------------------------------------------------------------

    def start(self) -> None:
        """Start the sweeper on the running loop (idempotent)."""
        if self._sweeper is None or self._sweeper.done():
            self._sweeper = asyncio.get_running_loop().create_task(self._sweep_forever())

    async def aclose(self) -> None:
        """Stop the sweeper and close every session (the env itself is the caller's to close)."""
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
        for session_id in list(self._sessions):
            await self.close(session_id)

    async def _sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(self.sweep_s)
            try:
                await self.sweep()
            except Exception:  # never let the sweeper die
                log.exception("session sweep failed")

    async def sweep(self) -> int:
        """Expire the sessions idle past ``ttl_s`` (a session in use is never idle); their count."""
        now = self.clock()
        idle = [
            s.id for s in self._sessions.values() if not s.lock.locked() and now - s.last_used > self.ttl_s
        ]
        for session_id in idle:
            await self.close(session_id)
        self.expired += len(idle)
        return len(idle)

    # ----- sessions -----------------------------------------------------------------------------

    async def create(self, **state: Any) -> Session:
        """A new session (``state`` its protocol state); ``Overloaded`` when ``max_sessions`` are live."""
        if len(self._sessions) >= self.max_sessions:
            await self.sweep()
        if len(self._sessions) >= self.max_sessions:
            raise Overloaded(
                f"{self.max_sessions} sessions are open (the maximum): close one or retry later",
                retry_after=max(1.0, min(self.sweep_s, 30.0)),
            )
        now = self.clock()
        session = Session(secrets.token_urlsafe(16), now, now, state=dict(state))
        self._sessions[session.id] = session
        return session

    def get(self, session_id: Any) -> Session:
        """The live session ``session_id`` (``BadRequest`` if malformed, ``UnknownSession`` if none)."""
        if not isinstance(session_id, str) or not _ID.fullmatch(session_id):
            raise BadRequest("session id must be a string of 16-64 URL-safe characters")
        session = self._sessions.get(session_id)
        if session is None:
            raise UnknownSession(f"no live session {session_id!r} (never opened, closed, or expired)")
        return session

    @contextlib.asynccontextmanager
    async def use(self, session_id: Any, deadline_s: float | None = None) -> AsyncIterator[Session]:
        """Hold session ``session_id``'s lock for one request, within ``deadline_s`` (default the store's).

        Past the deadline the request is cancelled, the session marked broken and
        ``DeadlineExceeded`` raised.
        """
        session = self.get(session_id)
        deadline = deadline_s if deadline_s is not None else self.request_deadline_s
        entered = False
        try:
            async with asyncio.timeout(deadline):
                async with session.lock:
                    if session.closed:
                        raise UnknownSession(f"session {session_id!r} was closed")
                    if session.broken:
                        raise Conflict(
                            f"session {session_id!r} is unusable: {session.broken}; open a new one"
                        )
                    session.last_used = self.clock()
                    entered = True
                    try:
                        yield session
                    finally:
                        session.last_used = self.clock()
        except TimeoutError:
            if entered:  # cut mid-request: the episode may be half-advanced
                session.broken = f"a request passed its deadline of {deadline:g} s"
                raise DeadlineExceeded(f"the request did not finish within {deadline:g} s") from None
            raise DeadlineExceeded(
                f"session {session_id!r} stayed busy with another request past {deadline:g} s"
            ) from None

    async def close(self, session_id: str) -> bool:
        """End session ``session_id``'s episode and drop it; False when there was none."""
        session = self._sessions.pop(session_id, None)
        if session is None:
            return False
        session.closed = True
        await self.end_episode(session)
        return True

    # ----- episodes -----------------------------------------------------------------------------

    async def start_episode(self, session: Session, row: Row) -> Episode:
        """Begin an episode of ``row`` in ``session`` (ending the one it held); a bad row is a ``BadRequest``."""
        if not isinstance(row, dict):
            raise BadRequest(f"a task row must be a JSON object, got {type(row).__name__}")
        await self.end_episode(session)
        try:
            loaded = self.env.load(row)
        except (TaskError, KeyError, TypeError, ValueError) as exc:
            raise BadRequest(f"bad task row for {type(self.env).__name__}: {exc}") from None
        session.episode = await self.env.astart(loaded)
        return session.episode

    async def end_episode(self, session: Session) -> None:
        """Release the session's episode (``Env.aend``, bounded by ``END_TIMEOUT_S``), if it holds one."""
        episode, session.episode = session.episode, None
        if episode is not None:
            try:
                async with asyncio.timeout(END_TIMEOUT_S):
                    await self.env.aend(episode)
            except Exception as exc:
                log.warning("ending the episode of task %s failed: %s", episode.task_id, exc)

    def stats(self) -> dict[str, int]:
        """Live and expired session counts."""
        return {"live": len(self._sessions), "max": self.max_sessions, "expired": self.expired}
