"""Episode metrics, computed in one place for ``eval`` and for training.

An episode counts towards an env's mean reward when it was scored (its reward is not masked);
masked ones (verifier or judge failures, policy errors) are counted apart, never as 0. An episode
counts as truncated when the env ended it early (turn limit, budget, overflow) or any turn was cut
at the generation length limit.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .runner import EpisodeResult, GroupResult


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
    turn_lengths: list[int] = field(default_factory=list)
    """Completion tokens of every model turn (turns without token ids are left out)."""
    error_examples: list[str] = field(default_factory=list)

    @property
    def mean_reward(self) -> float:
        return self.reward_sum / self.scored if self.scored else float("nan")

    def add(self, episode: EpisodeResult) -> None:
        self.episodes += 1
        self.turns += episode.turns
        self.turn_lengths += [
            len(t.completion_ids) for t in episode.trajectory.turns if t.completion_ids is not None
        ]
        self.truncated += int(episode.truncated or episode.hit_length_limit)
        if episode.error:
            self.errors += 1
            if len(self.error_examples) < 3:
                self.error_examples.append(episode.error[:200])
        if episode.reward.masked:
            self.masked += 1
        else:
            self.scored += 1
            self.reward_sum += episode.reward.value

    def merge(self, other: EnvStats) -> None:
        for name in ("episodes", "reward_sum", "scored", "masked", "errors", "truncated", "turns"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.turn_lengths += other.turn_lengths


class MixMetrics:
    """Per-env metrics over the episodes of a run (or of one training step)."""

    def __init__(self) -> None:
        self.stats: dict[str, EnvStats] = {}

    def add(self, episode: EpisodeResult) -> None:
        self.stats.setdefault(episode.env_id, EnvStats()).add(episode)

    def add_groups(self, groups: Iterable[GroupResult]) -> MixMetrics:
        for group in groups:
            for episode in group.episodes:
                self.add(episode)
        return self

    def total(self) -> EnvStats:
        total = EnvStats()
        for s in self.stats.values():
            total.merge(s)
        return total

    def as_metrics(self) -> dict[str, Any]:
        """Flat metrics: ``reward/mean``, ``reward/<env>``, truncation, masking and length figures."""
        total = self.total()
        metrics: dict[str, Any] = {"reward/mean": total.mean_reward}
        for env_id, s in sorted(self.stats.items()):
            metrics[f"reward/{env_id}"] = s.mean_reward
        n = max(total.episodes, 1)
        lengths = total.turn_lengths
        metrics["rollout/episodes"] = float(total.episodes)
        metrics["rollout/masked"] = float(total.masked)
        metrics["rollout/truncation_rate"] = total.truncated / n
        metrics["rollout/turns_mean"] = total.turns / n
        metrics["rollout/response_length"] = sum(lengths) / len(lengths) if lengths else float("nan")
        metrics["rollout/response_length_max"] = float(max(lengths, default=0))
        return metrics

    def table(self) -> str:
        """A plain-text summary table, one row per env plus a total."""
        header = (
            f"{'env':<36} {'episodes':>8} {'reward':>7} {'masked':>6} {'errors':>6} {'trunc':>6} {'turns':>5}"
        )
        lines = [header, "-" * len(header)]
        for env_id, s in sorted(self.stats.items()):
            lines.append(_row(env_id, s))
        if len(self.stats) > 1:
            lines += ["-" * len(header), _row("all", self.total())]
        return "\n".join(lines)


def _row(name: str, s: EnvStats) -> str:
    n = max(s.episodes, 1)
    reward = "n/a" if s.scored == 0 else f"{s.mean_reward:.3f}"
    return f"{name:<36} {s.episodes:>8} {reward:>7} {s.masked:>6} {s.errors:>6} {s.truncated / n:>6.1%} {s.turns / n:>5.2f}"
