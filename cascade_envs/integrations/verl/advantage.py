"""``cascade_grpo``: verl's GRPO advantage with masked samples kept out of the group statistics.

A sample is masked when its whole ``response_mask`` is 0 (the agent loop's masked rewards) or its
score is not finite (``compute_score``'s NaN). Each masked sample becomes a group of its own, with
score 0 and mask 0, so verl's own ``compute_grpo_outcome_advantage`` gives it advantage 0 and
computes every other group's mean and std without it. Unmasked batches get exactly verl's GRPO.
Use it with ``algorithm.adv_estimator=cascade_grpo``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage, register_adv_est

NAME = "cascade_grpo"


def masked_rows(token_level_rewards: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """A bool per sample: masked (no trained token, or a non-finite score)."""
    scores = token_level_rewards.sum(dim=-1)
    return (response_mask.sum(dim=-1) == 0) | ~torch.isfinite(scores)


@register_adv_est(NAME)
def compute_cascade_grpo_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray,
    epsilon: float = 1e-6,
    norm_adv_by_std_in_grpo: bool | None = None,
    config: Any = None,
    **_: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """verl's GRPO over the unmasked samples; masked ones get advantage 0 (see the module docstring)."""
    if norm_adv_by_std_in_grpo is None:
        norm_adv_by_std_in_grpo = bool(config.get("norm_adv_by_std_in_grpo", True)) if config else True
    masked = masked_rows(token_level_rewards, response_mask)
    keys = np.empty(len(index), dtype=object)
    for i, key in enumerate(index):
        keys[i] = ("cascade-masked", i) if bool(masked[i]) else key
    rewards = torch.where(masked[:, None], torch.zeros_like(token_level_rewards), token_level_rewards)
    mask = response_mask * (~masked)[:, None].to(response_mask.dtype)
    return compute_grpo_outcome_advantage(
        token_level_rewards=rewards,
        response_mask=mask,
        index=keys,
        epsilon=epsilon,
        norm_adv_by_std_in_grpo=norm_adv_by_std_in_grpo,
        config=config,
    )
