"""The rollout runner: episodes of any env mix, concurrently, in one event loop.

Each task is played ``group_size`` times (a GRPO group). Per episode the runner drives the policy
and the env turn by turn, recording a ``Trajectory`` (token ids, logprobs, timings per turn); it
enforces the episode's wall-clock deadline and token budget and ends an episode whose context
overflows as truncated. Scoring goes through the env's one scoring path (``Env.ascore_episodes``):
an episode of a per-sample env is scored, and its state released, as soon as it ends (so a
sandbox or a container is not held while the rest of its group plays); a group-scored env gets
its whole group once every episode of it has ended.

Every episode of the run ends up in the results — scored, or marked with the error that stopped it
(a dead policy server, a broken task) as a masked reward — and each finished group is appended to
the results file at once, so a crash loses nothing already done. A record is the episode's
``EpisodeResult.to_dict()`` with its task row (``task_row``) and env kwargs (``env_kwargs``), from
which ``cascade-envs rescore`` rebuilds it.

Envs: the runner plays on an ``EnvSet`` (one instance per env id). Given one (``envs=``, e.g. an
``EnvMix``'s), it leaves closing it to its maker; otherwise it makes its own from ``env_kwargs`` (and
the instances in a plain ``envs`` mapping, which stay their maker's to close), and ``aclose`` (or
``async with``) closes what that set made, with every client, pool and sandbox they hold.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core import Completion, Message, Reward, Row
from ..data import Loaded, task_id
from ..defaults import DEFAULT_CONCURRENCY
from ..env import Env, Episode, run_sync
from ..env_set import EnvSet
from ..policy import ContextOverflowError, Policy, SamplingParams
from ..trajectory import Trajectory, TurnRecord

log = logging.getLogger("cascade_envs.rollout")


@dataclass(slots=True)
class EpisodeResult:
    """One played episode, as the runner reports it."""

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
    trajectory: Trajectory = field(default_factory=Trajectory)

    @property
    def hit_length_limit(self) -> bool:
        """True when any model turn was cut at the maximum generation length."""
        return any(c.truncated for c in self.completions)

    @property
    def response(self) -> Completion:
        """The last model turn (the final answer of a single-turn episode)."""
        return self.completions[-1] if self.completions else Completion("")

    def to_dict(self) -> dict[str, Any]:
        """The results-file record; each response's text is stored once (in ``messages``)."""
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
            "trajectory": self.trajectory.to_dict(),
        }


@dataclass(slots=True)
class GroupResult:
    """The ``group_size`` episodes of one task (``row``: the task's row, as given or as its env read it)."""

    env_id: str
    task_id: str
    row: Any
    episodes: list[EpisodeResult] = field(default_factory=list)

    @property
    def rewards(self) -> list[float]:
        return [e.reward.value for e in self.episodes]


class RolloutRunner:
    """Plays ``(env_id, task)`` items with a policy; see the module docstring and ``arun``.

    ``episode_timeout_s`` and ``max_episode_tokens`` are the defaults for envs that set none.
    """

    def __init__(
        self,
        policy: Policy,
        *,
        sampling: SamplingParams | None = None,
        group_size: int = 1,
        concurrency: int = DEFAULT_CONCURRENCY,
        envs: Mapping[str, Env] | None = None,
        env_kwargs: Mapping[str, Mapping[str, Any]] | None = None,
        results_path: str | Path | None = None,
        progress: bool = False,
        episode_timeout_s: float | None = None,
        max_episode_tokens: int | None = None,
    ):
        if group_size < 1 or concurrency < 1:
            raise ValueError("group_size and concurrency must be at least 1")
        self.policy = policy
        self.sampling = sampling or SamplingParams()
        self.group_size = group_size
        self.concurrency = concurrency
        self.envs = envs if isinstance(envs, EnvSet) else EnvSet(env_kwargs, borrowed=envs)
        self._owns_envs = self.envs is not envs
        self.results_path = Path(results_path) if results_path else None
        self.progress = progress
        self.episode_timeout_s = episode_timeout_s
        self.max_episode_tokens = max_episode_tokens
        self._warned_prefix: set[str] = set()
        self._generating = 0
        self._busy_since = 0.0
        self.generation_s = 0.0
        """Wall-clock seconds during which at least one generation was in flight (all runs)."""

    # ----- envs and lifecycle --------------------------------------------------------------------

    async def aclose(self) -> None:
        """Close the envs this runner made (not a set it was given)."""
        if self._owns_envs:
            await self.envs.aclose()

    def close(self) -> None:
        run_sync(self.aclose())

    async def __aenter__(self) -> RolloutRunner:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    # ----- running -------------------------------------------------------------------------------

    async def arun(self, items: Iterable[tuple[str, Row | Loaded[Any]]]) -> list[GroupResult]:
        """Play every item ``group_size`` times; return the groups in input order.

        An item's task is a ``Loaded`` of its env (``env.tasks``, ``EnvMix.sample``) or a raw row,
        which the env loads once for the whole group (a bad row fails its group's episodes).
        """
        items = list(items)
        semaphore = asyncio.Semaphore(self.concurrency)
        bar = _progress_bar(len(items) * self.group_size, self.progress)
        if self.results_path:
            self.results_path.parent.mkdir(parents=True, exist_ok=True)
        out = self.results_path.open("a", encoding="utf-8") if self.results_path else None

        async def play_group(index: int, env_id: str, item: Row | Loaded[Any]) -> GroupResult:
            group = GroupResult(env_id, _safe_task_id(item), item.row if isinstance(item, Loaded) else item)
            try:
                env = self.envs.env(env_id)
            except Exception as exc:
                self._fail(group, index, f"cannot make {env_id}: {type(exc).__name__}: {exc}")
            else:
                try:
                    loaded = env.load(item)
                except Exception as exc:
                    self._fail(group, index, f"{type(exc).__name__}: {exc}")
                    bar.update(self.group_size)
                else:
                    await self._play_group(env, loaded, group, index, semaphore, bar)
            if out:
                recorded = self._recorded(group)
                out.write(
                    "".join(
                        json.dumps({**e.to_dict(), **recorded}, ensure_ascii=False) + "\n"
                        for e in group.episodes
                    )
                )
                out.flush()
            return group

        try:
            return list(await asyncio.gather(*(play_group(i, e, t) for i, (e, t) in enumerate(items))))
        finally:
            if out:
                out.close()
            bar.close()

    def run(self, items: Iterable[tuple[str, Row | Loaded[Any]]]) -> list[GroupResult]:
        return run_sync(self.arun(items))

    def _recorded(self, group: GroupResult) -> dict[str, Any]:
        """What a results record adds to its episode so that ``rescore`` can rebuild it: the task row
        and the env's kwargs (``None`` when unknown, e.g. an env handed in made, or not plain JSON data)."""
        kwargs = self.envs.kwargs_of(group.env_id)
        return {"task_row": _plain(group.row), "env_kwargs": _plain(kwargs)}

    def _fail(self, group: GroupResult, index: int, error: str) -> None:
        group.episodes = [
            _failed(group.env_id, group.task_id, index, s, error) for s in range(self.group_size)
        ]

    async def _play_group(
        self,
        env: Env,
        loaded: Loaded[Any],
        group: GroupResult,
        index: int,
        semaphore: asyncio.Semaphore,
        bar: Any,
    ) -> None:
        played = await asyncio.gather(
            *(self._episode(semaphore, env, loaded, group, index, s, bar) for s in range(self.group_size))
        )
        group.episodes = [result for result, _ in played]
        if not env.scores_groups:
            return  # each episode was scored (and released) as it ended
        scorable = [(r, e) for r, e in played if e is not None and r.error is None]
        if scorable:
            await self._score(env, scorable)
        await asyncio.gather(*(env.aend(e) for _, e in played if e is not None))

    async def _score(self, env: Env, played: list[tuple[EpisodeResult, Episode]]) -> None:
        """Score through the env's one scoring path and store the rewards on the results."""
        try:
            rewards = await env.ascore_episodes([e for _, e in played])
        except Exception as exc:  # the scoring path masks its own failures; this is a last guard
            rewards = [Reward.failed(f"scoring raised {type(exc).__name__}: {exc}")] * len(played)
        for (result, _), reward in zip(played, rewards, strict=True):
            result.reward = reward

    async def _episode(
        self,
        semaphore: asyncio.Semaphore,
        env: Env,
        loaded: Loaded[Any],
        group: GroupResult,
        index: int,
        sample: int,
        bar: Any,
    ) -> tuple[EpisodeResult, Episode | None]:
        async with semaphore:
            start = time.perf_counter()
            result = EpisodeResult(group.env_id, group.task_id, index, sample, [], [], Reward(0.0))
            episode: Episode | None = None
            try:
                episode = await env.astart(loaded)
                deadline = env.episode_timeout_s or self.episode_timeout_s
                sampling = self._sampling_for(index, sample)
                if deadline:
                    await self._play_within_deadline(env, episode, result.trajectory, deadline, sampling)
                else:
                    await self._play(env, episode, result.trajectory, sampling)
                if not env.scores_groups:  # per-sample envs: scored as soon as the episode ends
                    result.reward = (await env.ascore_episodes([episode]))[0]
            except Exception as exc:
                result.error = f"{type(exc).__name__}: {exc}"
                result.reward = Reward.failed(result.error)
            if episode is not None:
                result.messages, result.completions = episode.messages, episode.completions
                result.turns, result.terminated, result.truncated = (
                    episode.turns,
                    episode.terminated,
                    episode.truncated,
                )
                if not env.scores_groups:
                    await env.aend(episode)
                    episode = None  # scored and released: nothing left for the group to do
            result.elapsed_s = time.perf_counter() - start
            bar.update(1)
            if len(result.trajectory.turns) > 1:
                self._check_prefix(group.env_id, result.trajectory)
            return result, episode

    def _sampling_for(self, index: int, sample: int) -> SamplingParams:
        """The sampling settings of one episode: with a seed, each episode of the run gets its own.

        One seed for every request would make a seeded engine return the same sample G times per
        group; ``seed + index * group_size + sample`` keeps runs reproducible and samples distinct.
        """
        if self.sampling.seed is None:
            return self.sampling
        seed = (self.sampling.seed + index * self.group_size + sample) % 2**31
        return dataclasses.replace(self.sampling, seed=seed)

    async def _play_within_deadline(
        self, env: Env, episode: Episode, trajectory: Trajectory, deadline: float, sampling: SamplingParams
    ) -> None:
        scope = asyncio.timeout(deadline)
        try:
            async with scope:
                await self._play(env, episode, trajectory, sampling)
        except TimeoutError:
            if not scope.expired() or episode.done:
                raise
            await env.atruncate(episode, f"episode deadline of {deadline:g} s reached")

    async def _play(
        self, env: Env, episode: Episode, trajectory: Trajectory, sampling: SamplingParams
    ) -> None:
        budget = env.max_episode_tokens or self.max_episode_tokens
        while not episode.done:
            started = time.perf_counter()
            if self._generating == 0:
                self._busy_since = started
            self._generating += 1
            try:
                completion = await self.policy.agenerate(
                    list(episode.messages), sampling=sampling, thinking=episode.thinking
                )
            except ContextOverflowError as exc:
                if episode.turns == 0:
                    raise  # the task's own prompt does not fit: not the model's doing
                await env.atruncate(episode, f"context overflow: {exc}")
                return
            finally:
                self._generating -= 1
                if self._generating == 0:
                    self.generation_s += time.perf_counter() - self._busy_since
            generated = time.perf_counter()
            await env.aadvance(episode, completion)
            trajectory.turns.append(
                TurnRecord(
                    completion.prompt_token_ids,
                    completion.token_ids,
                    completion.logprobs,
                    completion.finish_reason,
                    generate_s=generated - started,
                    env_s=time.perf_counter() - generated,
                )
            )
            if budget is not None and not episode.done and _episode_tokens(episode, trajectory) >= budget:
                await env.atruncate(episode, f"token budget of {budget} reached")

    def _check_prefix(self, env_id: str, trajectory: Trajectory) -> None:
        broken = trajectory.has_tokens and trajectory.prefix_broken_at
        if broken and env_id not in self._warned_prefix:
            self._warned_prefix.add(env_id)
            log.warning(
                "%s: turn %d's prompt does not extend the previous prompt and completion (the chat template "
                "rewrites the history), so its episodes train as one sequence per turn",
                env_id,
                broken + 1,
            )


def _episode_tokens(episode: Episode, trajectory: Trajectory) -> int:
    """Tokens the episode holds so far: the last prompt + its completion (or ~4 characters a token)."""
    last = trajectory.turns[-1] if trajectory.turns else None
    if last is not None and last.has_tokens:
        return len(last.prompt_ids or ()) + len(last.completion_ids or ())
    return sum(len(str(m.get("content") or "")) for m in episode.messages) // 4


def _failed(env_id: str, key: str, group: int, sample: int, error: str) -> EpisodeResult:
    return EpisodeResult(env_id, key, group, sample, [], [], Reward.failed(error), error=error)


def _plain(value: Any) -> Any:
    """``value`` when it is plain JSON data, else ``None``."""
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return None
    return value


def _safe_task_id(item: Any) -> str:
    if isinstance(item, Loaded):
        return item.task_id
    return task_id(item) if isinstance(item, dict) else "<invalid>"


def _progress_bar(total: int, enabled: bool) -> Any:
    from tqdm.auto import tqdm

    return tqdm(total=total, disable=not enabled, unit="ep", dynamic_ncols=True, mininterval=0.5)


def run_rollouts(
    policy: Policy, items: Iterable[tuple[str, Row | Loaded[Any]]], **kwargs: Any
) -> list[GroupResult]:
    """Sync convenience: play ``items`` with a fresh runner and close the envs it made."""

    async def play() -> list[GroupResult]:
        async with RolloutRunner(policy, **kwargs) as runner:
            return await runner.arun(items)

    return run_sync(play())
