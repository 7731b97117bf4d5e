"""Advantage estimators: a group's rewards to sequence-level advantages, or the reason the group is left out.

The second of the trainer's two registries (the first is the loss strategies', ``strategies.py``),
as verl's ``core_algos`` keeps advantage estimators apart from policy losses: a strategy names the
estimator it trains with (``LossStrategy.advantage``), so any estimator can serve any loss. An
estimator is built from the ``rollout`` section (its group rules live there) and answers each group
with a ``GroupVerdict``: ``Advantages`` (one per sample, 0 for masked samples) or ``Skip(reason)``.

- ``grpo``: group-normalised ``(r - mean) / std`` (``losses.group_advantages``); with
  ``rollout.dynamic_filtering`` a group with fewer than two scored samples or all-equal rewards is
  skipped, and with ``rollout.mask_groups_below`` one where no scored reward is above that value;
- ``none``: zeros for every group, never a skip, rewards unread (``uses_rewards`` false, so a
  sample whose reward is masked still trains): for losses whose signal is elsewhere (MOPD's teachers).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

import torch

from ..registry import Registry, UnknownIdError
from .config import ConfigError, RolloutConfig
from .losses import group_advantages

SkipReason = Literal["all_equal", "too_few", "below_threshold"]


@dataclass(frozen=True)
class Advantages:
    """The group trains: one advantage per sample."""

    values: tuple[float, ...]


@dataclass(frozen=True)
class Skip:
    """The group is left out of the batch (fresh prompts replace it while rounds remain)."""

    reason: SkipReason


GroupVerdict = Advantages | Skip


class AdvantageEstimator(Protocol):
    uses_rewards: bool
    """Whether the verdict reads rewards; when not, a sample whose reward is masked still trains."""

    def __call__(self, rewards: Sequence[float], valid: Sequence[bool]) -> GroupVerdict:
        """The verdict on one group (``valid``: the samples that can be trained on)."""
        ...


class GRPOAdvantages:
    """Group-normalised advantages with GRPO's group rules; see the module docstring."""

    uses_rewards = True

    def __init__(self, rollout: RolloutConfig) -> None:
        if rollout.group_size < 2:
            raise ConfigError("rollout.group_size must be at least 2: GRPO compares rollouts within a group")
        self.dynamic_filtering = rollout.dynamic_filtering
        self.mask_groups_below = rollout.mask_groups_below

    def __call__(self, rewards: Sequence[float], valid: Sequence[bool]) -> GroupVerdict:
        kept = [r for r, ok in zip(rewards, valid, strict=True) if ok]
        if self.dynamic_filtering and len(kept) < 2:
            return Skip("too_few")
        if self.dynamic_filtering and max(kept) == min(kept):
            return Skip("all_equal")
        if self.mask_groups_below is not None and kept and max(kept) <= self.mask_groups_below:
            return Skip("below_threshold")
        table = torch.tensor([list(rewards)], dtype=torch.float64)
        return Advantages(tuple(float(a) for a in group_advantages(table, torch.tensor([list(valid)]))[0]))


class NoAdvantages:
    """Zeros, and no group ever left out; see the module docstring."""

    uses_rewards = False

    def __init__(self, rollout: RolloutConfig) -> None:
        if rollout.mask_groups_below is not None:
            raise ConfigError(
                "rollout.mask_groups_below does not apply to this algorithm: its advantage estimator "
                "'none' leaves no group out (e.g. MOPD trains on every sample with a teacher's token "
                "advantage, not on group rewards); set it to null"
            )

    def __call__(self, rewards: Sequence[float], valid: Sequence[bool]) -> GroupVerdict:
        return Advantages((0.0,) * len(rewards))


EstimatorFactory = Callable[[RolloutConfig], AdvantageEstimator]
advantage_estimators: Registry[EstimatorFactory] = Registry("advantage estimator")
advantage_estimators.register("grpo", GRPOAdvantages)
advantage_estimators.register("none", NoAdvantages)


def make_estimator(name: str, rollout: RolloutConfig) -> AdvantageEstimator:
    """The estimator registered as ``name``, built from (and checked against) the ``rollout`` section."""
    try:
        factory = advantage_estimators.get(name)
    except UnknownIdError as exc:
        raise ConfigError(f"algorithm: {exc}") from None
    return factory(rollout)
