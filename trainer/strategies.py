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
- ``uses_rewards``: whether rewards enter the loss; when not (MOPD), a sample whose reward is
  masked (e.g. the judge was down) still trains; failed episodes and samples without token ids are
  dropped either way;
- ``loss(inputs)`` -> ``(loss, metrics)``: one micro-batch's share of the step's loss; its metrics
  are summed over the step's micro-batches and ``finish_metrics(sums)`` turns the sums into what is
  logged (e.g. counts into fractions).

Strategies register in ``loss_strategies``; a plugin adds one with
``loss_strategies.register("name", Factory)`` where ``Factory(config) -> LossStrategy``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from ..registry import Registry
from .losses import grpo_loss, importance_weight, k3_kl, mopd_loss

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
    multi-turn episode); ``num_tokens`` counts those tokens over the whole step's batch and
    ``num_sequences`` the step's sequences that have at least one, so micro-batch losses add up
    to the batch loss. ``env_ids`` names each row's env; ``teacher_top1`` is 1 where the sampled
    token is the teacher's most likely one (with ``teacher_logp``).
    """

    logp: Tensor
    mask: Tensor
    advantages: Tensor
    num_tokens: float
    num_sequences: int
    reference_logp: Tensor | None = None
    inference_logp: Tensor | None = None
    teacher_logp: Tensor | None = None
    teacher_top1: Tensor | None = None
    env_ids: tuple[str, ...] = ()


class LossStrategy:
    """Base class of loss strategies; see the module docstring."""

    name: ClassVar[str] = ""
    sources: frozenset[str] = frozenset()
    uses_rewards: ClassVar[bool] = True

    def __init__(self, config: Config):
        self.config = config

    def check(self, config: Config) -> None:
        """Raise ``ConfigError`` for settings this algorithm cannot train with."""

    def group_advantages(self, rewards: Sequence[float], valid: Sequence[bool]) -> list[float] | str:
        """Advantages of one group's samples (0 for invalid ones), or the reason it is left out."""
        raise NotImplementedError

    def loss(self, inputs: LossInputs) -> tuple[Tensor, dict[str, float]]:
        raise NotImplementedError

    def finish_metrics(self, sums: dict[str, float]) -> dict[str, float]:
        """The step's metrics from the sums of the micro-batches' metrics (default: the sums)."""
        return sums


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


class MOPD(LossStrategy):
    """Multi-domain on-policy distillation (``mopd_loss``): a dense token advantage from each
    example's domain teacher, with the truncated train/inference importance weight.

    Rules: any group size (512 x 1 works); group advantages are unused (zeros) and no group is
    ever left out, so ``rollout.dynamic_filtering`` is ignored and ``rollout.mask_groups_below`` is
    refused; rewards are not part of the loss, so masked-reward samples still train. Tokens whose
    inference log-prob is missing get importance ratio 1 and are counted in
    ``mopd/tokens_without_inference_logprob``.
    """

    name = "mopd"
    sources = frozenset({"inference", "teacher"})
    uses_rewards = False

    def __init__(self, config: Config):
        super().__init__(config)
        self.eps_low = config.mopd.eps_low
        self.eps_high = config.mopd.eps_high
        self.normalization = config.mopd.normalization

    def check(self, config: Config) -> None:
        from .config import ConfigError, check_mopd_teachers

        if config.rollout.mask_groups_below is not None:
            raise ConfigError("rollout.mask_groups_below does not apply to algorithm mopd: MOPD trains on every "
                              "sample with a teacher's token advantage, not on group rewards; set it to null")
        check_mopd_teachers(config)

    def group_advantages(self, rewards: Sequence[float], valid: Sequence[bool]) -> list[float] | str:
        return [0.0] * len(rewards)

    def loss(self, inputs: LossInputs) -> tuple[Tensor, dict[str, float]]:
        import torch

        if inputs.teacher_logp is None or inputs.inference_logp is None:
            raise ValueError("MOPD needs the teacher and inference log-prob sources")
        keep = inputs.mask.bool()
        unscored = int((keep & ~torch.isfinite(inputs.teacher_logp)).sum())
        if unscored:
            raise ValueError(f"MOPD: {unscored} trained token(s) have no teacher log-prob "
                             "(score every sequence with TeacherPool.score before the loss)")
        loss = mopd_loss(
            inputs.logp, inputs.inference_logp, inputs.teacher_logp, inputs.mask, self.eps_low, self.eps_high,
            normalization=self.normalization, num_tokens=inputs.num_tokens, num_sequences=inputs.num_sequences,
        )
        logp = inputs.logp.detach().float()
        _, gated = importance_weight(logp, inputs.inference_logp, keep, self.eps_low, self.eps_high)
        advantage = torch.where(keep, inputs.teacher_logp.float() - logp, torch.zeros_like(logp))
        sums = {
            "tokens": float(keep.sum()),
            "gated": float(gated.sum()),
            "no_inference": float((keep & ~torch.isfinite(inputs.inference_logp)).sum()),
            "advantage": float(advantage.sum()),
        }
        if inputs.teacher_top1 is not None:
            sums["top1"] = float((inputs.teacher_top1.bool() & keep).sum())
        for row, env_id in enumerate(inputs.env_ids):
            sums[f"advantage/{env_id}"] = sums.get(f"advantage/{env_id}", 0.0) + float(advantage[row].sum())
            sums[f"tokens/{env_id}"] = sums.get(f"tokens/{env_id}", 0.0) + float(keep[row].sum())
        return loss, {f"mopd/_{key}": value for key, value in sums.items()}

    def finish_metrics(self, sums: dict[str, float]) -> dict[str, float]:
        raw = {key.removeprefix("mopd/_"): value for key, value in sums.items() if key.startswith("mopd/_")}
        out = {key: value for key, value in sums.items() if not key.startswith("mopd/_")}
        tokens = raw.get("tokens", 0.0)
        nan = float("nan")
        out["mopd/gated_fraction"] = raw.get("gated", 0.0) / tokens if tokens else nan
        out["mopd/reverse_kl"] = -raw.get("advantage", 0.0) / tokens if tokens else nan
        out["mopd/teacher_top1_agreement"] = raw["top1"] / tokens if tokens and "top1" in raw else nan
        out["mopd/tokens_without_inference_logprob"] = raw.get("no_inference", 0.0)
        for key, value in raw.items():
            if key.startswith("advantage/"):
                env_id = key.removeprefix("advantage/")
                n = raw.get(f"tokens/{env_id}", 0.0)
                out[f"mopd/advantage_mean/{env_id}"] = value / n if n else nan
        return out


loss_strategies: Registry[Callable[[Any], LossStrategy]] = Registry("loss strategy")
loss_strategies.register("grpo", GRPO)
loss_strategies.register("mopd", MOPD)


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
