"""Group scoring for group-scored envs (GenRM) under a deadline: a lost rollout never stalls its group.

NeMo Gym sends one ``/verify`` (or final ``/step``) per rollout; a group-scored env needs the G
answers to one prompt together. ``GroupScorer.score(key, episode)`` buffers finished episodes by
cohort key until G arrive, then scores them in one ``Env.ascore_episodes`` call. The first arrival
starts the cohort's clock: at ``deadline_s`` the cohort is scored with what arrived when that is at
least ``min_group`` episodes, else each waiting rollout gets a masked reward naming the deadline.
A waiter that goes away (its client disconnected) leaves its episode in the cohort, so the others
are still scored; cohorts are dropped once scored, so memory stays bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field

from ...core import Reward
from ...env import Env
from ...episode import Episode

log = logging.getLogger("cascade_envs.integrations.nemo_gym")

GROUP_INCOMPLETE = "group_incomplete"
"""Component of the masked rewards of a cohort too small to score at its deadline."""


@dataclass
class _Cohort:
    episodes: list[Episode] = field(default_factory=list)
    waiters: list[asyncio.Future[Reward]] = field(default_factory=list)
    timer: asyncio.Task[None] | None = None


class GroupScorer:
    """Cohorts of ``group_size`` episodes per key, scored together or at ``deadline_s``."""

    def __init__(self, env: Env, group_size: int, deadline_s: float, min_group: int = 2):
        if group_size < 1 or deadline_s <= 0 or min_group < 1:
            raise ValueError("group_size and min_group must be >= 1 and deadline_s > 0")
        self.env = env
        self.group_size = group_size
        self.deadline_s = deadline_s
        self.min_group = min(min_group, group_size)
        self._cohorts: dict[str, _Cohort] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self.scored_partial = 0
        """Cohorts scored (or masked) at their deadline, short of ``group_size``."""

    def pending(self) -> int:
        """Cohorts waiting for members."""
        return len(self._cohorts)

    async def score(self, key: str, episode: Episode) -> Reward:
        """``episode``'s reward once its cohort ``key`` is full or past its deadline."""
        loop = asyncio.get_running_loop()
        cohort = self._cohorts.setdefault(key, _Cohort())
        future: asyncio.Future[Reward] = loop.create_future()
        cohort.episodes.append(episode)
        cohort.waiters.append(future)
        if len(cohort.episodes) >= self.group_size:
            self._launch(key, cohort, partial=False)
        elif cohort.timer is None:
            cohort.timer = loop.create_task(self._expire(key, cohort))
        return await asyncio.shield(future)

    def _launch(self, key: str, cohort: _Cohort, partial: bool) -> None:
        if self._cohorts.get(key) is cohort:
            del self._cohorts[key]
        if cohort.timer is not None and cohort.timer is not asyncio.current_task():
            cohort.timer.cancel()
        task = asyncio.get_running_loop().create_task(self._score(cohort, partial))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _expire(self, key: str, cohort: _Cohort) -> None:
        await asyncio.sleep(self.deadline_s)
        if self._cohorts.get(key) is cohort:
            self.scored_partial += 1
            self._launch(key, cohort, partial=True)

    async def _score(self, cohort: _Cohort, partial: bool) -> None:
        arrived = len(cohort.episodes)
        try:
            if arrived < self.min_group:
                reason = (
                    f"group deadline of {self.deadline_s:g} s passed with {arrived} of "
                    f"{self.group_size} rollouts: too few to score as a group"
                )
                rewards = [Reward.failed(reason, **{GROUP_INCOMPLETE: True}) for _ in cohort.episodes]
            else:
                rewards = await self.env.ascore_episodes(cohort.episodes)
                if partial:
                    note = f"scored with {arrived} of {self.group_size} rollouts at the group deadline"
                    rewards = [
                        Reward(
                            r.value,
                            {**r.components, "group_arrived": arrived},
                            r.reason or note,
                            r.error,
                            r.masked,
                        )
                        for r in rewards
                    ]
        except Exception as exc:  # ascore_episodes masks scorer errors; this is a last resort
            log.exception("group scoring failed")
            rewards = [
                Reward.failed(f"group scoring raised {type(exc).__name__}: {exc}") for _ in cohort.episodes
            ]
        for future, reward in zip(cohort.waiters, rewards, strict=True):
            if not future.done():
                future.set_result(reward)

    async def aclose(self) -> None:
        """Score every waiting cohort now (as at its deadline) and wait for the scoring in flight."""
        for key, cohort in list(self._cohorts.items()):
            self._launch(key, cohort, partial=True)
        for task in list(self._tasks):
            with contextlib.suppress(Exception):
                await task
