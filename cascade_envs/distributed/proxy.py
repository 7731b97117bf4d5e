"""``RayEnv``: an env that plays and scores through an ``ActorPool``, used exactly like the env.

What runs where: a stateless env (no ``on_reset``/``on_end``/``aturn`` of its own: MCQA, Math,
IF, structured outputs, code, GenRM) plays its episodes here (building the prompt and recording
the answer cost nothing) and ships each finished episode, or group, to the least-loaded actor for
scoring (``Env.ascore_episodes`` runs there, judges and sandboxes included); an actor death is
retried on a live one, so nothing is lost. A stateful or multi-turn env (workplace) plays the
whole episode on one actor: ``astart`` picks the least-loaded actor and every later turn,
truncation, scoring and release of that episode goes to the same actor (sticky routing), while
this side keeps a mirror of the transcript. If that actor dies the episode's state is gone: the
episode ends with a masked reward naming the reason (the runner trains nothing on it).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..core import CascadeError, Completion, Message, Reward, Row, as_completion
from ..data import Loaded
from ..env import Env
from ..episode import Episode, Turn
from .actor import EpisodeView
from .pool import ActorPool, EpisodeLost, PoolCallFailed

log = logging.getLogger("cascade_envs.distributed")

LOST_SUFFIX = "; its state lived in that actor, so the episode cannot go on and its sample is masked"
_MIRRORED = (
    "metadata",
    "max_turns",
    "thinking",
    "tool_parser",
    "episode_timeout_s",
    "max_episode_tokens",
    "system_prompt",
    "observation_space",
    "action_space",
    "tasks",
)


def is_stateful(env_class: type) -> bool:
    """True when the env keeps per-episode state or answers turns (its episodes must stay on one actor)."""
    return any(getattr(env_class, name) is not getattr(Env, name) for name in ("on_reset", "on_end", "aturn"))


@dataclass(slots=True)
class RemoteEpisode:
    """Where a sticky episode lives: actor slot, the slot's generation, and the actor's key."""

    index: int
    generation: int
    key: str
    released: bool = False


class RayEnv(Env[Any]):
    """``local`` (the env as made in this process) with its scoring or episodes on ``pool``.

    ``sticky``: play whole episodes on the actors (default: when the env is stateful). Closing
    it kills the pool's actors and closes ``local``.
    """

    def __init__(self, local: Env, pool: ActorPool, *, sticky: bool | None = None):
        # Env.__init__ is not called: this proxy mirrors ``local``'s settings and task source.
        self.local, self.pool = local, pool
        self.sticky = is_stateful(type(local)) if sticky is None else sticky
        if self.sticky and local.scores_groups:
            raise CascadeError(
                f"{type(local).__name__} keeps per-episode state and scores whole groups: "
                "its groups cannot be spread over Ray actors"
            )
        for name in _MIRRORED:
            setattr(self, name, getattr(local, name))
        setattr(self, "scores_groups", local.scores_groups)  # noqa: B010 - a ClassVar of Env, per instance here
        self.episode = None

    def __getattr__(self, name: str) -> Any:  # env-specific attributes read by callers
        local = self.__dict__.get("local")
        if local is None:
            raise AttributeError(name)
        return getattr(local, name)

    def load_task(self, row: Row) -> Any:
        return self.local.load_task(row)

    def prompt(self, task: Any) -> list[Message]:
        return self.local.prompt(task)

    # ----- playing --------------------------------------------------------------------------------

    async def astart(self, loaded: Loaded[Any]) -> Episode:
        """Non-sticky: here. Sticky: on an actor, whose env loads the row (a typed task stays in its process)."""
        if not self.sticky:
            return await self.local.astart(loaded)
        for attempt in range(self.pool.retries + 1):
            index, generation = await self.pool.pick()
            key = uuid.uuid4().hex
            try:
                episode: Episode = await self.pool.call_on(index, generation, "start", key, loaded.row)
            except EpisodeLost:  # nothing was played yet: start it on another actor
                self.pool.drop(index, generation)
                if attempt == self.pool.retries:
                    raise
                continue
            except BaseException:
                self.pool.drop(index, generation)
                raise
            episode.task, episode.state = loaded.task, RemoteEpisode(index, generation, key)
            return episode
        raise AssertionError("unreachable")

    async def aadvance(self, episode: Episode, action: str | Completion) -> Turn:
        if not self.sticky:
            return await self.local.aadvance(episode, action)
        if episode.done:
            raise RuntimeError("the episode has ended")
        remote = _remote(episode)
        completion = as_completion(action)
        known = len(episode.messages)
        try:
            turn, view = await self.pool.call_on(
                remote.index, remote.generation, "advance", remote.key, _slim(completion), known
            )
        except (EpisodeLost, PoolCallFailed) as exc:
            episode.turns += 1
            episode.messages.append({"role": "assistant", "content": str(completion)})
            episode.completions.append(completion)
            return self._lose(episode, str(exc))
        episode.completions.append(completion)
        _apply(episode, view)
        return turn

    async def atruncate(self, episode: Episode, reason: str) -> None:
        if not self.sticky:
            return await self.local.atruncate(episode, reason)
        remote = _remote(episode)
        if remote.released:
            return
        try:
            view = await self.pool.call_on(
                remote.index, remote.generation, "truncate", remote.key, reason, len(episode.messages)
            )
        except (EpisodeLost, PoolCallFailed) as exc:
            self._lose(episode, str(exc))
            return
        _apply(episode, view)

    async def aend(self, episode: Episode) -> None:
        if not self.sticky:
            return await self.local.aend(episode)
        remote = _remote(episode)
        if remote.released:
            return
        remote.released = True
        try:
            await self.pool.call_on(remote.index, remote.generation, "end", remote.key)
        except (EpisodeLost, PoolCallFailed) as exc:
            log.warning("%s: could not release episode %s: %s", self.pool.name, episode.task_id, exc)
        finally:
            self.pool.drop(remote.index, remote.generation)

    def _lose(self, episode: Episode, reason: str) -> Turn:
        remote = _remote(episode)
        if not remote.released:
            remote.released = True
            self.pool.drop(remote.index, remote.generation)
        episode.terminated, episode.outcome = True, Reward.failed(reason + LOST_SUFFIX)
        return Turn(reward=episode.outcome, done=True)

    # ----- scoring --------------------------------------------------------------------------------

    async def ascore_episodes(self, episodes: Sequence[Episode]) -> list[Reward]:
        """Score on the actors (see the module docstring); a failure masks with its reason."""
        if all(e.outcome is not None for e in episodes):
            return [e.outcome for e in episodes if e.outcome is not None]
        if self.sticky:
            return await self._score_held(episodes)
        try:
            rewards: list[Reward] = await self.pool.call("score", [_slim_episode(e) for e in episodes])
        except Exception as exc:
            return [Reward.failed(f"scoring on Ray failed: {type(exc).__name__}: {exc}")] * len(episodes)
        return rewards

    async def _score_held(self, episodes: Sequence[Episode]) -> list[Reward]:
        rewards: list[Reward | None] = [None] * len(episodes)
        by_actor: dict[tuple[int, int], list[int]] = {}
        for i, episode in enumerate(episodes):
            remote = _remote(episode)
            if remote.released and episode.outcome is not None:
                rewards[i] = episode.outcome  # lost with its actor: masked with the reason
            else:
                by_actor.setdefault((remote.index, remote.generation), []).append(i)

        async def on_actor(slot: tuple[int, int], picks: list[int]) -> None:
            keys = [_remote(episodes[i]).key for i in picks]
            try:
                got = await self.pool.call_on(*slot, "score_held", keys)
            except (EpisodeLost, PoolCallFailed) as exc:
                got = [self._lose(episodes[i], str(exc)).reward for i in picks]
            for i, reward in zip(picks, got, strict=True):
                rewards[i] = reward

        await asyncio.gather(*(on_actor(slot, picks) for slot, picks in by_actor.items()))
        return [r if r is not None else Reward.failed("not scored") for r in rewards]

    async def aclose(self) -> None:
        await super().aclose()
        await self.pool.aclose()
        await self.local.aclose()


def _remote(episode: Episode) -> RemoteEpisode:
    if not isinstance(episode.state, RemoteEpisode):
        raise CascadeError("this episode was not started by this RayEnv (its state is not a remote episode)")
    return episode.state


def _apply(episode: Episode, view: EpisodeView) -> None:
    new_messages, episode.turns, episode.terminated, episode.truncated, episode.outcome = view
    episode.messages.extend(new_messages)


def _slim(completion: Completion) -> Completion:
    """The completion as an env reads it (text and finish reason), without token ids and logprobs."""
    return Completion(str(completion), completion.finish_reason)


def _slim_episode(episode: Episode) -> Episode:
    copy = Episode(episode.task, episode.task_id, episode.messages, episode.thinking, episode.max_turns)
    copy.completions = [_slim(c) for c in episode.completions]
    copy.turns, copy.terminated, copy.truncated, copy.outcome = (
        episode.turns,
        episode.terminated,
        episode.truncated,
        episode.outcome,
    )
    return copy
