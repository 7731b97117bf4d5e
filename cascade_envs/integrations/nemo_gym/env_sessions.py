"""NeMo Gym 0.7's environment-server session contract, and its replay guards, over the session store.

From 0.7, rollout collection reaches agents through environment servers. One that owns the episode
(``single_agent_turn``) seeds the resources server with a typed body (``resources_session_id`` it
chose, ``episode_id``, ``task_id``, ``task_data``: the row less ``responses_create_params``) and ends
with ``POST /close_session``. The contract: a repeated seed of the same id and episode returns the
session it made; a close succeeds for a session already closed or never seeded; a seed after its
id's close is refused, so a late retry cannot bring it back. ``SeededSessions`` keeps that mapping,
and a bounded memory of closed ids.

``StepReplays`` answers a retried gymnasium ``/step`` (the same ``_ng_step_request_id``, sent again
by the agent's HTTP client after a lost reply) with the answer it already gave, so a turn is never
played twice; a session's final answers outlive it for as long as they are remembered.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from ...serving import BadRequest, Conflict, Session, SessionStore

REMEMBERED = 65536
"""Closed ids (and final step answers) kept: a retry older than this many closes is not recognised."""
STEP_ID_KEY = "_ng_step_request_id"


@dataclass(frozen=True)
class TypedSeed:
    """A typed ``/seed_session`` body: its session id, episode, cohort key and task row."""

    resources_session_id: str
    episode: str
    task_key: str
    row: Any


def typed_seed(body: dict[str, Any]) -> TypedSeed | None:
    """The typed seed in ``body`` (None for a row seeded the pre-0.7 way); ``BadRequest`` if malformed."""
    if "resources_session_id" not in body:
        return None
    rsid, episode, task, data = (
        body.get(k) for k in ("resources_session_id", "episode_id", "task_id", "task_data")
    )
    if not isinstance(rsid, str) or not rsid or len(rsid) > 256:
        raise BadRequest("'resources_session_id' must be a non-empty string of at most 256 characters")
    if not isinstance(episode, dict) or not isinstance(task, dict) or not isinstance(data, dict):
        raise BadRequest("a typed seed needs objects 'episode_id', 'task_id' and 'task_data'")
    task_key = f"{task.get('taskset')}/{task.get('task_id')}"
    return TypedSeed(rsid, json.dumps(episode, sort_keys=True), task_key, data.get("cascade_row", data))


class _Bounded(OrderedDict[str, Any]):
    """An insertion-ordered map that forgets its oldest entries past ``limit``."""

    def __init__(self, limit: int):
        super().__init__()
        self.limit = limit

    def remember(self, key: str, value: Any) -> None:
        self[key] = value
        self.move_to_end(key)
        while len(self) > self.limit:
            self.popitem(last=False)


class SeededSessions:
    """``resources_session_id`` -> the store's session, per the contract in the module docstring."""

    def __init__(self, store: SessionStore):
        self.store = store
        self._live: dict[str, tuple[str, str]] = {}  # rsid -> (session id, episode)
        self._closed = _Bounded(REMEMBERED)

    def __len__(self) -> int:
        """Ids bound to a session not yet known to have ended."""
        return len(self._live)

    def existing(self, seed: TypedSeed) -> Session | None:
        """The live session of a repeated seed, None for a new id; ``Conflict`` for a closed id or
        an id seeded for another episode."""
        if seed.resources_session_id in self._closed:
            raise Conflict(f"resources session {seed.resources_session_id!r} was closed: seed a new id")
        bound = self._live.get(seed.resources_session_id)
        if bound is None:
            return None
        session_id, episode = bound
        if episode != seed.episode:
            raise Conflict(f"resources session {seed.resources_session_id!r} belongs to another episode")
        if session_id not in self.store:  # finished (verified) or expired since: no longer seedable
            self._forget(seed.resources_session_id)
            raise Conflict(f"resources session {seed.resources_session_id!r} has ended: seed a new id")
        return self.store.get(session_id)

    def bind(self, seed: TypedSeed, session: Session) -> None:
        """Record ``session`` as ``seed``'s; ids whose sessions ended are forgotten as the map grows."""
        self._live[seed.resources_session_id] = (session.id, seed.episode)
        if len(self._live) > 2 * self.store.max_sessions:
            for rsid, (session_id, _) in list(self._live.items()):
                if session_id not in self.store:
                    self._forget(rsid)

    async def close(self, resources_session_id: str) -> None:
        """Close the id's session if live; the id can never be seeded again (while remembered)."""
        bound = self._live.get(resources_session_id)
        self._forget(resources_session_id)
        if bound is not None:
            await close_locked(self.store, bound[0])

    def _forget(self, resources_session_id: str) -> None:
        self._live.pop(resources_session_id, None)
        self._closed.remember(resources_session_id, None)


async def close_locked(store: SessionStore, session_id: str) -> None:
    """Close ``session_id`` if live, once the request using it (if any) is done with it."""
    if session_id in store:
        session = store.get(session_id)
        async with session.lock:
            await store.close(session_id)


def step_request_id(body: dict[str, Any]) -> str | None:
    """The body's ``_ng_step_request_id`` (None without one); ``BadRequest`` unless a short string."""
    value = body.get(STEP_ID_KEY)
    if value is not None and (not isinstance(value, str) or not value or len(value) > 128):
        raise BadRequest(f"'{STEP_ID_KEY}' must be a non-empty string of at most 128 characters")
    return value


class StepReplays:
    """The answers already given to ``/step`` requests that carried an id; see the module docstring."""

    def __init__(self) -> None:
        self._final = _Bounded(REMEMBERED)

    @staticmethod
    def live(session: Session, request_id: str | None) -> dict[str, Any] | None:
        """The answer ``session`` gave to ``request_id`` last, if that was its last step."""
        last = session.state.get("last_step")
        return last[1] if request_id is not None and last and last[0] == request_id else None

    def final(self, session_id: str, request_id: str | None) -> dict[str, Any] | None:
        """The final answer session ``session_id`` (now closed) gave to ``request_id``, if remembered."""
        return self._final.get(f"{session_id}/{request_id}") if request_id is not None else None

    def record(
        self, session: Session, request_id: str | None, answer: dict[str, Any], *, final: bool
    ) -> None:
        """Remember ``answer`` to ``request_id`` (nothing without an id)."""
        if request_id is None:
            return
        if final:
            self._final.remember(f"{session.id}/{request_id}", answer)
        else:
            session.state["last_step"] = (request_id, answer)
