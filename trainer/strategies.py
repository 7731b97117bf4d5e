"""Loss strategies: the objective of a run, looked up by name (``algorithm:`` in the run config).

The training loop is the same for every algorithm: collect trajectories, compute the log-prob
sources the strategy declares, call it, step the optimizer, sync the engine. A strategy owns what
only holds for its algorithm:

- ``check(config)``: settings it needs (GRPO compares rollouts, so a group holds at least two);
- ``group_advantages(rewards, valid)``: a group's sequence-level advantages, or why the group is
  left out of the batch (dynamic filtering and ``rollout.mask_groups_below`` are GRPO's rules);
- ``sources``: the per-token log-probs it reads besides the policy's own: ``"reference"`` (the
  frozen start model), ``"inference"`` (what the rollout engine reported), ``"teacher"`` (the
  example's domain teacher);
- ``loss(inputs)`` -> ``(loss, metrics)``: one micro-batch's share of the step's loss.

Strategies register in ``loss_strategies``; a plugin adds one with
``loss_strategies.register("name", Factory)`` where ``Factory(config) -> LossStrategy``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from ..registry import Registry
from .losses import grpo_loss, k3_kl

if TYPE_CHECKING:
    from torch import Tensor

    from .config import Config

FILTERED = "all rewards equal"
TOO_FEW = "fewer than two scored samples"
BELOW_THRESHOLD = "no rollout scores above rollout.mask_groups_below"


@dataclass
class LossInputs:
    """Per-token tensors ``[batch, tokens]`` of one micro-batch, aligned with the response tokens.

    ``mask`` is 1 on tokens the policy sampled (0 on padding and on env/template tokens of a
    multi-turn episode); ``num_tokens`` counts those tokens over the whole step's batch, so
    micro-batch losses add up to the batch loss.
    """

    logp: Tensor
    mask: Tensor
    advantages: Tensor
    num_tokens: float
    num_sequences: int
    reference_logp: Tensor | None = None
    inference_logp: Tensor | None = None
    teacher_logp: Tensor | None = None


class LossStrategy:
    """Base class of loss strategies; see the module docstring."""

    name: ClassVar[str] = ""
    sources: frozenset[str] = frozenset()

    def __init__(self, config: Config):
        self.config = config

    def check(self, config: Config) -> None:
        """Raise ``ConfigError`` for settings this algorithm cannot train with."""

    def group_advantages(self, rewards: Sequence[float], valid: Sequence[bool]) -> list[float] | str:
        """Advantages of one group's samples (0 for invalid ones), or the reason it is left out."""
        raise NotImplementedError

    def loss(self, inputs: LossInputs) -> tuple[Tensor, dict[str, float]]:
        raise NotImplementedError


class GRPO(LossStrategy):
    """Strictly on-policy GRPO with group-normalised advantages and optional k3 KL to the reference."""

    name = "grpo"

    def __init__(self, config: Config):
        super().__init__(config)
        self.kl_coef = config.optim.kl_coef
        self.dynamic_filtering = config.rollout.dynamic_filtering
        self.mask_groups_below = config.rollout.mask_groups_below
        self.sources = frozenset({"reference"}) if self.kl_coef > 0 else frozenset()

    def check(self, config: Config) -> None:
        from .config import ConfigError

        if config.rollout.group_size < 2:
            raise ConfigError("rollout.group_size must be at least 2: GRPO compares rollouts within a group")

    def group_advantages(self, rewards: Sequence[float], valid: Sequence[bool]) -> list[float] | str:
        import torch

        from .losses import group_advantages

        kept = [r for r, ok in zip(rewards, valid, strict=True) if ok]
        if self.dynamic_filtering and len(kept) < 2:
            return TOO_FEW
        if self.dynamic_filtering and max(kept) == min(kept):
            return FILTERED
        if self.mask_groups_below is not None and kept and max(kept) <= self.mask_groups_below:
            return BELOW_THRESHOLD
        table = torch.tensor([list(rewards)], dtype=torch.float64)
        return [float(a) for a in group_advantages(table, torch.tensor([list(valid)]))[0]]

    def loss(self, inputs: LossInputs) -> tuple[Tensor, dict[str, float]]:
        loss = grpo_loss(
            inputs.logp, inputs.advantages, inputs.mask, inputs.reference_logp, self.kl_coef,
            num_tokens=inputs.num_tokens,
        )
        metrics: dict[str, float] = {}
        if inputs.reference_logp is not None:
            keep = inputs.mask.bool()
            kl = k3_kl(inputs.logp.detach(), inputs.reference_logp)
            metrics["train/kl_sum"] = float(kl[keep].sum())
        return loss, metrics


loss_strategies: Registry[Callable[[Any], LossStrategy]] = Registry("loss strategy")
loss_strategies.register("grpo", GRPO)


def make_strategy(config: Config) -> LossStrategy:
    """The strategy named by ``config.algorithm``, checked against the config."""
    from ..registry import UnknownIdError
    from .config import ConfigError

    try:
        factory = loss_strategies.get(config.algorithm)
    except UnknownIdError as exc:
        raise ConfigError(f"algorithm: {exc}") from None
    strategy = factory(config)
    strategy.check(config)
    return strategy
