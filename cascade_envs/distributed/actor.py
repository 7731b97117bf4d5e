"""``EnvActor``: one env instance living in a Ray actor, with the episodes it holds.

The actor builds its env from ``(entry, kwargs)``: a registered env id or an ``Env`` class, so
the env's run-wide resources (judge clients, sandboxes, verifier worker pools) live on the node
Ray placed it on. Stateless scoring ships finished episodes here (``score``, ``score_answer``);
a stateful env plays whole episodes here (``start`` ... ``end``), each kept under the key its
proxy chose, so all of an episode's turns must come back to this actor (sticky routing).
"""

from __future__ import annotations

import os
import socket
from typing import Any

from ..core import Completion, Message, Reward, Row
from ..env import Env
from ..episode import Episode, Turn


class UnknownEpisode(LookupError):
    """The actor holds no episode under this key (it was restarted and lost its state)."""


EpisodeView = tuple[list[Message], int, bool, bool, Reward | None]
"""What a proxy mirrors of an actor-held episode: new messages, turns, terminated, truncated, outcome."""


def build_env(entry: str | type, kwargs: dict[str, Any]) -> Env:
    """The env of ``entry`` (an env id or an ``Env`` subclass) with ``kwargs``."""
    if isinstance(entry, str):
        from ..registry import make

        env = make(entry, **kwargs)
    else:
        env = entry(**kwargs)
    if not isinstance(env, Env):
        raise TypeError(f"{entry} made a {type(env).__name__}, not a cascade_envs.Env")
    return env


class EnvActor:
    """The Ray actor class of ``ActorPool`` (wrapped with ``ray.remote`` there)."""

    def __init__(self, entry: str | type, kwargs: dict[str, Any]):
        self.env = build_env(entry, kwargs)
        self.episodes: dict[str, Episode] = {}

    def ready(self) -> dict[str, Any]:
        return {"pid": os.getpid(), "host": socket.gethostname()}

    # ----- stateless scoring ----------------------------------------------------------------------

    async def score(self, episodes: list[Episode]) -> list[Reward]:
        """The env's one scoring path over finished episodes (a group, or one episode)."""
        return await self.env.ascore_episodes(episodes)

    async def score_answer(self, task: Any, answer: str) -> Reward:
        """``Env.ascore`` of one final answer (reasoning already split off)."""
        try:
            return await self.env.ascore(task, answer)
        except Exception as exc:
            return Reward.failed(f"{type(self.env).__name__} verifier raised {type(exc).__name__}: {exc}")

    # ----- stateful episodes (sticky) -------------------------------------------------------------

    async def start(self, key: str, row: Row) -> Episode:
        """Begin an episode of ``row`` (loaded by this actor's env) kept here under ``key``; returns it
        without its state."""
        episode = await self.env.astart(self.env.load(row))
        self.episodes[key] = episode
        return _without_state(episode)

    async def advance(self, key: str, action: Completion, known: int) -> tuple[Turn, EpisodeView]:
        """One model turn of the episode ``key``; ``known``: messages the proxy already mirrors."""
        episode = self._get(key)
        turn = await self.env.aadvance(episode, action)
        return turn, _view(episode, known)

    async def truncate(self, key: str, reason: str, known: int) -> EpisodeView:
        episode = self._get(key)
        await self.env.atruncate(episode, reason)
        return _view(episode, known)

    async def score_held(self, keys: list[str]) -> list[Reward]:
        """Score episodes held here (one group of a stateful env) through the env's scoring path."""
        return await self.env.ascore_episodes([self._get(key) for key in keys])

    async def end(self, key: str) -> None:
        """Release the episode's state (``Env.aend``) and forget it."""
        episode = self.episodes.pop(key, None)
        if episode is not None:
            await self.env.aend(episode)

    def held(self) -> int:
        return len(self.episodes)

    async def close(self) -> None:
        for key in list(self.episodes):
            await self.end(key)
        await self.env.aclose()

    def _get(self, key: str) -> Episode:
        try:
            return self.episodes[key]
        except KeyError:
            raise UnknownEpisode(f"episode {key} is not held by this actor (it was restarted)") from None


def _without_state(episode: Episode) -> Episode:
    """What the proxy mirrors: the episode without its state and its task (the proxy holds its own)."""
    copy: Episode = Episode(
        None, episode.task_id, list(episode.messages), episode.thinking, episode.max_turns
    )
    copy.completions, copy.turns = list(episode.completions), episode.turns
    copy.terminated, copy.truncated, copy.outcome = episode.terminated, episode.truncated, episode.outcome
    return copy


def _view(episode: Episode, known: int) -> EpisodeView:
    return episode.messages[known:], episode.turns, episode.terminated, episode.truncated, episode.outcome
