"""``EnvMix``: seeded, weighted sampling of tasks over several environments, and per-env metrics."""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .core import CascadeError, Task
from .env import Env
from .registry import make

log = logging.getLogger("cascade_envs.mix")


def normalise_weights(weights: Mapping[str, float]) -> dict[str, float]:
    """Check weights (finite, non-negative, some positive) and scale them to sum to one."""
    if not weights:
        raise CascadeError("an env mix needs at least one env")
    for env_id, weight in weights.items():
        if not isinstance(weight, (int, float)) or isinstance(weight, bool) or not math.isfinite(weight):
            raise CascadeError(f"weight of {env_id!r} must be a finite number, got {weight!r}")
        if weight < 0:
            raise CascadeError(f"weight of {env_id!r} is negative ({weight})")
    total = float(sum(weights.values()))
    if total <= 0:
        raise CascadeError("env mix weights sum to zero")
    if not math.isclose(total, 1.0, rel_tol=1e-6):
        log.warning("env mix weights sum to %.6g, not 1; normalising", total)
    return {env_id: float(w) / total for env_id, w in weights.items()}


class EnvMix:
    """Weighted sampling over env ids.

    Each env's tasks are drawn without replacement in a seeded shuffled order (a new shuffle per
    pass), so a mix visits every task of an env before repeating one.
    """

    def __init__(
        self,
        weights: Mapping[str, float] | Iterable[str],
        *,
        seed: int = 0,
        env_kwargs: Mapping[str, Mapping[str, Any]] | None = None,
    ):
        if not isinstance(weights, Mapping):
            ids = list(weights)
            weights = {env_id: 1.0 / max(len(ids), 1) for env_id in ids}
        self.weights = normalise_weights(weights)
        self.env_kwargs = {k: dict(v) for k, v in (env_kwargs or {}).items()}
        self.envs: dict[str, Env] = {}
        for env_id in self.weights:
            env = make(env_id, **self.env_kwargs.get(env_id, {}))
            if getattr(env, "tasks", None) is None or len(env.tasks) == 0:
                raise CascadeError(f"{env_id} has no tasks: give it tasks= in the mix's env kwargs")
            self.envs[env_id] = env
        self._rng = np.random.default_rng(seed)
        self._orders: dict[str, list[int]] = {env_id: [] for env_id in self.weights}

    @property
    def ids(self) -> list[str]:
        return list(self.weights)

    def _next_task(self, env_id: str) -> Task:
        tasks = self.envs[env_id].tasks
        assert tasks is not None
        order = self._orders[env_id]
        if not order:
            order.extend(int(i) for i in self._rng.permutation(len(tasks)))
        return tasks[order.pop()]

    def sample(self, n: int) -> list[tuple[str, Task]]:
        """Draw ``n`` ``(env_id, task)`` items."""
        ids = self.ids
        probabilities = np.array([self.weights[i] for i in ids])
        picks = self._rng.choice(len(ids), size=n, p=probabilities)
        return [(ids[int(p)], self._next_task(ids[int(p)])) for p in picks]

    def all_tasks(self, limit: int | None = None) -> list[tuple[str, Task]]:
        """Every task of every env (at most ``limit`` per env), in file order: an evaluation pass."""
        items: list[tuple[str, Task]] = []
        for env_id, env in self.envs.items():
            assert env.tasks is not None
            items += [(env_id, task) for task in list(env.tasks)[:limit]]
        return items

    def state_dict(self) -> dict[str, Any]:
        """Sampler state, for checkpoint/resume."""
        return {"rng": self._rng.bit_generator.state, "orders": {k: list(v) for k, v in self._orders.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._rng.bit_generator.state = state["rng"]
        self._orders = {k: list(v) for k, v in state["orders"].items()}


@dataclass
class EnvStats:
    """Running metrics of one env."""

    episodes: int = 0
    reward_sum: float = 0.0
    scored: int = 0
    masked: int = 0
    errors: int = 0
    truncated: int = 0
    turns: int = 0
    response_chars: int = 0
    error_examples: list[str] = field(default_factory=list)

    @property
    def mean_reward(self) -> float:
        return self.reward_sum / self.scored if self.scored else float("nan")

    def as_dict(self) -> dict[str, Any]:
        n = max(self.episodes, 1)
        return {
            "episodes": self.episodes,
            "mean_reward": self.mean_reward,
            "masked": self.masked,
            "errors": self.errors,
            "truncation_rate": self.truncated / n,
            "mean_turns": self.turns / n,
            "mean_response_chars": self.response_chars / n,
        }


class MixMetrics:
    """Per-env metrics over episodes (``EpisodeResult``-like objects)."""

    def __init__(self) -> None:
        self.stats: dict[str, EnvStats] = {}

    def add(self, episode: Any) -> None:
        s = self.stats.setdefault(episode.env_id, EnvStats())
        s.episodes += 1
        s.turns += episode.turns
        s.response_chars += sum(len(c) for c in episode.completions)
        s.truncated += int(episode.truncated or episode.hit_length_limit)
        if episode.error:
            s.errors += 1
            if len(s.error_examples) < 3:
                s.error_examples.append(episode.error[:200])
        if episode.reward.masked:
            s.masked += 1
        else:
            s.scored += 1
            s.reward_sum += episode.reward.value

    def add_groups(self, groups: Iterable[Any]) -> MixMetrics:
        for group in groups:
            for episode in group.episodes:
                self.add(episode)
        return self

    def table(self) -> str:
        """A plain-text summary table, one row per env plus a total."""
        header = f"{'env':<36} {'episodes':>8} {'reward':>7} {'masked':>6} {'errors':>6} {'trunc':>6} {'turns':>5}"
        lines = [header, "-" * len(header)]
        total = EnvStats()
        for env_id, s in sorted(self.stats.items()):
            lines.append(_row(env_id, s))
            for name in ("episodes", "reward_sum", "scored", "masked", "errors", "truncated", "turns"):
                setattr(total, name, getattr(total, name) + getattr(s, name))
        if len(self.stats) > 1:
            lines += ["-" * len(header), _row("all", total)]
        return "\n".join(lines)


def _row(name: str, s: EnvStats) -> str:
    d = s.as_dict()
    reward = "n/a" if s.scored == 0 else f"{d['mean_reward']:.3f}"
    return (
        f"{name:<36} {s.episodes:>8} {reward:>7} {s.masked:>6} {s.errors:>6} "
        f"{d['truncation_rate']:>6.1%} {d['mean_turns']:>5.2f}"
    )
