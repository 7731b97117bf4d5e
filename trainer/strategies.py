"""Loss strategies: the objective of a run, looked up by name (``algorithm:`` in the run config).

The training loop is the same for every algorithm: collect trajectories, ask each log-prob source
the strategy declares for the batch's scores, compute the loss micro-batch by micro-batch, step the
optimizer, sync the engine. A strategy owns what only holds for its loss:

- ``advantage``: the advantage estimator it trains with (``advantages.py``: ``grpo``, ``none``);
- ``sources``: the per-token log-probs its loss reads besides the policy's own (``sources.py``):
  ``reference`` (the frozen start model), ``inference`` (what the rollout engine reported),
  ``teacher`` (the example's domain teacher);
- ``loss(inputs)`` -> ``(loss, sums)``: one micro-batch's share of the step's loss, and metric sums
  (floats, or tensors the loop reads once at the end of the step, so a pass needs no device read);
  ``finish_metrics(sums)`` turns the sums over the step's micro-batches (floats) into what is logged.

A strategy is built from the sections that hold loss settings: ``optim`` (``kl_coef``) and ``mopd``.
Strategies are registered in ``cascade_envs.registry.loss_strategies`` the way envs are: the built-in
ones by this package's plugin (``trainer/plugin.py``), a plugin's through the
``cascade_envs_register_loss_strategies`` hook, code's with ``register_loss_strategy``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import ClassVar, Literal

import torch
from torch import Tensor

from ..registry import Spec, UnknownIdError, loss_strategies
from .config import ConfigError, MOPDConfig, OptimConfig
from .losses import grpo_loss, importance_weight, k3_kl, mopd_loss

SourceName = Literal["reference", "inference", "teacher"]


@dataclass(frozen=True)
class SourceTensors:
    """One log-prob source's view of a micro-batch, ``[batch, tokens]`` like ``LossInputs.logp``."""

    logp: Tensor
    """Log-probabilities of the response tokens (NaN where the source has none, and on padding)."""
    top1: Tensor | None = None
    """1.0 where the token is the source's most likely one, else 0.0 (``None``: not computed)."""


@dataclass
class LossInputs:
    """Per-token tensors ``[batch, tokens]`` of one micro-batch, aligned with the response tokens.

    ``mask`` is 1 on tokens the policy sampled (0 on padding and on env/template tokens of a
    multi-turn episode); ``num_tokens`` counts those tokens over the whole step's batch and
    ``num_sequences`` the step's sequences that have at least one, so micro-batch losses add up
    to the batch loss. ``sources`` holds the declared log-prob sources; ``env_ids`` names each row's env.
    """

    logp: Tensor
    mask: Tensor
    advantages: Tensor
    num_tokens: float
    num_sequences: int
    sources: Mapping[str, SourceTensors] = field(default_factory=dict)
    env_ids: tuple[str, ...] = ()

    def source(self, name: SourceName) -> SourceTensors:
        if name not in self.sources:
            raise ValueError(
                f"the loss reads the {name} log-probs, but its strategy does not declare that source"
            )
        return self.sources[name]


class LossStrategy:
    """Base class of loss strategies; see the module docstring."""

    advantage: ClassVar[str] = "grpo"
    sources: frozenset[SourceName] = frozenset()

    def __init__(self, optim: OptimConfig, mopd: MOPDConfig) -> None:
        """Read the settings the loss needs from its sections (the base reads none)."""

    def loss(self, inputs: LossInputs) -> tuple[Tensor, dict[str, float | Tensor]]:
        raise NotImplementedError

    def finish_metrics(self, sums: dict[str, float]) -> dict[str, float]:
        """The step's metrics from the sums of the micro-batches' metrics (default: the sums)."""
        return sums


class GRPO(LossStrategy):
    """Strictly on-policy GRPO with group-normalised advantages and optional k3 KL to the reference."""

    def __init__(self, optim: OptimConfig, mopd: MOPDConfig) -> None:
        self.kl_coef = optim.kl_coef
        self.sources = frozenset({"reference"}) if self.kl_coef > 0 else frozenset()

    def loss(self, inputs: LossInputs) -> tuple[Tensor, dict[str, float | Tensor]]:
        reference = inputs.source("reference").logp if "reference" in self.sources else None
        loss = grpo_loss(
            inputs.logp, inputs.advantages, inputs.mask, reference, self.kl_coef, num_tokens=inputs.num_tokens
        )
        metrics: dict[str, float | Tensor] = {}
        if reference is not None:
            kl = k3_kl(inputs.logp.detach(), reference)
            metrics["train/kl_sum"] = torch.where(inputs.mask.bool(), kl, torch.zeros_like(kl)).sum()
        return loss, metrics


class MOPD(LossStrategy):
    """Multi-domain on-policy distillation (``mopd_loss``): a dense token advantage from each
    example's domain teacher, with the truncated train/inference importance weight.

    Rules: any group size (512 x 1 works); advantages are ``none`` (zeros, no group ever left out),
    so ``rollout.dynamic_filtering`` is ignored, ``rollout.mask_groups_below`` is refused, and
    masked-reward samples still train. Tokens whose inference log-prob is missing get importance
    ratio 1 and are counted in ``mopd/tokens_without_inference_logprob``.
    """

    advantage = "none"
    sources = frozenset({"inference", "teacher"})

    def __init__(self, optim: OptimConfig, mopd: MOPDConfig) -> None:
        self.eps_low = mopd.eps_low
        self.eps_high = mopd.eps_high
        self.normalization = mopd.normalization

    def loss(self, inputs: LossInputs) -> tuple[Tensor, dict[str, float | Tensor]]:
        teacher, inference = inputs.source("teacher"), inputs.source("inference").logp
        keep = inputs.mask.bool()
        unscored = int((keep & ~torch.isfinite(teacher.logp)).sum())
        if unscored:
            raise ValueError(
                f"MOPD: {unscored} trained token(s) have no teacher log-prob "
                "(the teacher source must score every sequence)"
            )
        loss = mopd_loss(
            inputs.logp,
            inference,
            teacher.logp,
            inputs.mask,
            self.eps_low,
            self.eps_high,
            normalization=self.normalization,
            num_tokens=inputs.num_tokens,
            num_sequences=inputs.num_sequences,
        )
        logp = inputs.logp.detach().float()
        _, gated = importance_weight(logp, inference, keep, self.eps_low, self.eps_high)
        advantage = torch.where(keep, teacher.logp.float() - logp, torch.zeros_like(logp))
        sums: dict[str, float | Tensor] = {
            "tokens": keep.sum(),
            "gated": gated.sum(),
            "no_inference": (keep & ~torch.isfinite(inference)).sum(),
            "advantage": advantage.sum(),
        }
        if teacher.top1 is not None:
            sums["top1"] = (teacher.top1.bool() & keep).sum()
        for row, env_id in enumerate(inputs.env_ids):
            sums[f"advantage/{env_id}"] = sums.get(f"advantage/{env_id}", 0.0) + advantage[row].sum()
            sums[f"tokens/{env_id}"] = sums.get(f"tokens/{env_id}", 0.0) + keep[row].sum()
        return loss, sums

    def finish_metrics(self, sums: dict[str, float]) -> dict[str, float]:
        tokens = sums.get("tokens", 0.0)
        nan = float("nan")
        out = {
            "mopd/gated_fraction": sums.get("gated", 0.0) / tokens if tokens else nan,
            "mopd/reverse_kl": -sums.get("advantage", 0.0) / tokens if tokens else nan,
            "mopd/teacher_top1_agreement": sums["top1"] / tokens if tokens and "top1" in sums else nan,
            "mopd/tokens_without_inference_logprob": sums.get("no_inference", 0.0),
        }
        for key, value in sums.items():
            if key.startswith("advantage/"):
                env_id = key.removeprefix("advantage/")
                n = sums.get(f"tokens/{env_id}", 0.0)
                out[f"mopd/advantage_mean/{env_id}"] = value / n if n else nan
        return out


LossFactory = Callable[[OptimConfig, MOPDConfig], LossStrategy]


def register_loss_strategy(name: str, factory: LossFactory) -> None:
    """Register (or replace) a loss strategy from code; plugins use the hook instead."""
    loss_strategies.ensure_loaded()
    loss_strategies.register(name, Spec(name, factory, plugin="<runtime>"), replace=True)


def make_strategy(name: str, optim: OptimConfig, mopd: MOPDConfig) -> LossStrategy:
    """The strategy registered as ``name`` (``algorithm:``), built from its sections."""
    try:
        spec = loss_strategies.get(name)
    except UnknownIdError as exc:
        raise ConfigError(f"algorithm: {exc}") from None
    strategy = spec.load()(optim, mopd)
    if not isinstance(strategy, LossStrategy):
        raise ConfigError(
            f"algorithm: {name} (entry point {spec.entry_point!r} of plugin {spec.plugin!r}) made a "
            f"{type(strategy).__name__}, not a LossStrategy"
        )
    return strategy
