"""The rollout runner: episodes of any env mix, concurrently, in one event loop.

Each task is played ``group_size`` times (a GRPO group). Every episode of the run ends up in the
results — scored, or marked with the error that stopped it (a dead policy server, a broken task)
as a masked reward — and each finished group is appended to the results file at once, so a crash
loses nothing already done.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core import Completion, Message, Reward, Task
from ..data import task_id
from ..env import Env, run_sync
from ..registry import make
from .policy import Policy, SamplingParams


@dataclass
class EpisodeResult:
    """One played episode."""

    env_id: str
    task_id: str
    group: int
    sample: int
    messages: list[Message]
    completions: list[Completion]
    reward: Reward
    turns: int = 0
    terminated: bool = False
    truncated: bool = False
    error: str | None = None
    elapsed_s: float = 0.0

    @property
    def hit_length_limit(self) -> bool:
        """True when any model turn was cut at the maximum generation length."""
        return any(c.truncated for c in self.completions)

    @property
    def response(self) -> Completion:
        """The last model turn (the final answer of a single-turn episode)."""
        return self.completions[-1] if self.completions else Completion("")

    def to_dict(self) -> dict[str, Any]:
        return {
            "env_id": self.env_id,
            "task_id": self.task_id,
            "group": self.group,
            "sample": self.sample,
            "reward": self.reward.value,
            "reward_info": self.reward.to_dict(),
            "turns": self.turns,
            "terminated": self.terminated,
            "truncated": self.truncated,
            "finish_reason": self.response.finish_reason,
            "error": self.error,
            "elapsed_s": round(self.elapsed_s, 4),
            "messages": self.messages,
            "completions": [c.to_dict() for c in self.completions],
        }


@dataclass
class GroupResult:
    """The ``group_size`` episodes of one task."""

    env_id: str
    task_id: str
    task: Task
    episodes: list[EpisodeResult] = field(default_factory=list)

    @property
    def rewards(self) -> list[float]:
        return [e.reward.value for e in self.episodes]


class RolloutRunner:
    """Plays ``(env_id, task)`` items with a policy; see ``arun``."""

    def __init__(
        self,
        policy: Policy,
        *,
        sampling: SamplingParams | None = None,
        group_size: int = 1,
        concurrency: int = 64,
        env_kwargs: dict[str, dict[str, Any]] | None = None,
        results_path: str | Path | None = None,
        progress: bool = False,
        env_factory: Callable[[str], Env] | None = None,
    ):
        if group_size < 1 or concurrency < 1:
            raise ValueError("group_size and concurrency must be at least 1")
        self.policy = policy
        self.sampling = sampling or SamplingParams()
        self.group_size = group_size
        self.concurrency = concurrency
        self.env_kwargs = env_kwargs or {}
        self.results_path = Path(results_path) if results_path else None
        self.progress = progress
        self._env_factory = env_factory or (lambda env_id: make(env_id, **self.env_kwargs.get(env_id, {})))
        self._scorers: dict[str, Env] = {}

    async def arun(self, items: Iterable[tuple[str, Task]]) -> list[GroupResult]:
        """Play every item ``group_size`` times; return the groups in input order."""
        items = list(items)
        semaphore = asyncio.Semaphore(self.concurrency)
        bar = _progress_bar(len(items) * self.group_size, self.progress)
        if self.results_path:
            self.results_path.parent.mkdir(parents=True, exist_ok=True)
        out = self.results_path.open("a", encoding="utf-8") if self.results_path else None

        async def play_group(index: int, env_id: str, task: Task) -> GroupResult:
            group = GroupResult(env_id, _safe_task_id(task), task)
            episodes = [
                self._episode(semaphore, env_id, task, group.task_id, index, s, bar) for s in range(self.group_size)
            ]
            group.episodes = list(await asyncio.gather(*episodes))
            await self._score_group(group)
            if out:
                out.write("".join(json.dumps(e.to_dict(), ensure_ascii=False) + "\n" for e in group.episodes))
                out.flush()
            return group

        try:
            return list(await asyncio.gather(*(play_group(i, e, t) for i, (e, t) in enumerate(items))))
        finally:
            if out:
                out.close()
            bar.close()

    def run(self, items: Iterable[tuple[str, Task]]) -> list[GroupResult]:
        return run_sync(self.arun(items))

    async def _episode(
        self,
        semaphore: asyncio.Semaphore,
        env_id: str,
        task: Task,
        task_key: str,
        group: int,
        sample: int,
        bar: Any,
    ) -> EpisodeResult:
        async with semaphore:
            start = time.perf_counter()
            result = EpisodeResult(env_id, task_key, group, sample, [], [], Reward(0.0))
            env: Env | None = None
            try:
                env = self._env_factory(env_id)
                await self._play(env, task, result)
            except Exception as exc:
                result.error = f"{type(exc).__name__}: {exc}"
                result.reward = Reward.failed(result.error)
            finally:
                if env is not None:
                    await _close_quietly(env)
                result.elapsed_s = time.perf_counter() - start
                bar.update(1)
            return result

    async def _play(self, env: Env, task: Task, result: EpisodeResult) -> None:
        observation, info = await env.areset(options={"task": task})
        result.messages = list(observation)
        thinking = bool(info.get("thinking", True))
        while True:
            completion = await self.policy.agenerate(result.messages, sampling=self.sampling, thinking=thinking)
            result.completions.append(completion)
            result.messages.append({"role": "assistant", "content": str(completion)})
            observation, _, terminated, truncated, step_info = await env.astep(completion)
            result.turns += 1
            result.messages.extend(observation)
            result.reward = step_info["reward"]
            if terminated or truncated:
                result.terminated, result.truncated = terminated, truncated
                return

    async def _score_group(self, group: GroupResult) -> None:
        """Rescore with ``ascore_group`` for envs whose group reward is more than per-sample."""
        played = [e for e in group.episodes if e.error is None]
        if not played:
            return
        try:
            scorer = self._scorers.get(group.env_id) or self._env_factory(group.env_id)
            self._scorers[group.env_id] = scorer
            if not type(scorer).scores_groups:
                return
            rewards = await scorer.ascore_group(group.task, [e.response for e in played])
        except Exception as exc:
            rewards = [Reward.failed(f"group scoring raised {type(exc).__name__}: {exc}")] * len(played)
        for episode, reward in zip(played, rewards, strict=True):
            episode.reward = reward


def _safe_task_id(task: Any) -> str:
    return task_id(task) if isinstance(task, dict) else "<invalid>"


async def _close_quietly(env: Env) -> None:
    with contextlib.suppress(Exception):  # closing must not turn a scored episode into an error
        await env.aclose()


def _progress_bar(total: int, enabled: bool) -> Any:
    from tqdm.auto import tqdm

    return tqdm(total=total, disable=not enabled, unit="ep", dynamic_ncols=True, mininterval=0.5)


def run_rollouts(policy: Policy, items: Iterable[tuple[str, Task]], **kwargs: Any) -> list[GroupResult]:
    """Sync convenience around ``RolloutRunner(policy, **kwargs).run(items)``."""
    return RolloutRunner(policy, **kwargs).run(items)
