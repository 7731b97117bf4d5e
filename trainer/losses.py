"""GRPO and MOPD losses (DESIGN.md §6), public so they can be checked on their own.

Per-token tensors are ``[batch, tokens]`` log-probabilities of the *sampled* tokens; ``mask`` is 1
on valid response tokens and 0 on padding (and on anything else that is not trained). Every loss
is normalised by the number of valid tokens of the whole batch (token-level normalisation). When a
batch is split into micro-batches for gradient accumulation, pass that batch-wide count as
``num_tokens`` so that the summed micro-batch gradients equal the full-batch gradient.

Losses are computed in float32 whatever the input dtype (bf16 log-probs are upcast), and each
returns a scalar to minimise.
"""

from __future__ import annotations

import torch
from torch import Tensor


def group_advantages(rewards: Tensor, valid: Tensor | None = None) -> Tensor:
    """Group-normalised advantages ``(r - mean) / std`` per row of ``rewards`` ``[groups, G]``.

    ``std`` is the unbiased sample standard deviation (as ``torch.std``). A group whose rewards
    are all equal — or that has fewer than two valid samples — gets zeros. ``valid`` (bool,
    same shape) leaves masked samples out of the statistics; they get advantage 0. Computed in
    float64, so "all equal" means what it means for the Python floats the envs return.
    """
    if rewards.dim() != 2:
        raise ValueError(f"rewards must be [groups, G], got shape {tuple(rewards.shape)}")
    r = rewards.double()
    ok = torch.ones_like(r, dtype=torch.bool) if valid is None else valid.bool()
    ok = ok & torch.isfinite(r)
    r = torch.where(ok, r, torch.zeros_like(r))
    n = ok.sum(dim=1, keepdim=True)
    mean = r.sum(dim=1, keepdim=True) / n.clamp(min=1)
    centred = torch.where(ok, r - mean, torch.zeros_like(r))
    std = (centred.square().sum(dim=1, keepdim=True) / (n - 1).clamp(min=1)).sqrt()
    lo = torch.where(ok, r, torch.full_like(r, float("inf"))).amin(dim=1, keepdim=True)
    hi = torch.where(ok, r, torch.full_like(r, float("-inf"))).amax(dim=1, keepdim=True)
    constant = (n < 2) | (hi <= lo)
    advantages = centred / torch.where(constant, torch.ones_like(std), std)
    return torch.where(constant | ~ok, torch.zeros_like(advantages), advantages).to(rewards.dtype)


def _masked(x: Tensor, keep: Tensor) -> Tensor:
    """``x`` in float32 with non-valid positions set to 0 (so NaN/inf padding cannot leak)."""
    return torch.where(keep, x.float(), torch.zeros((), dtype=torch.float32, device=x.device))


def _token_count(mask: Tensor, num_tokens: float | Tensor | None) -> Tensor:
    count = mask.float().sum() if num_tokens is None else torch.as_tensor(num_tokens, dtype=torch.float32)
    return count.clamp(min=1.0)


def k3_kl(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """Per-token k3 estimator of KL(pi || ref): ``exp(ref - logp) - (ref - logp) - 1`` (>= 0)."""
    delta = ref_logp.float() - logp.float()
    return torch.exp(delta) - delta - 1.0


def grpo_loss(
    logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    ref_logp: Tensor | None = None,
    kl_coef: float = 0.0,
    *,
    num_tokens: float | Tensor | None = None,
) -> Tensor:
    """Strictly on-policy GRPO loss with token-level normalisation.

    The importance ratio ``exp(logp - sg(logp))`` is exactly 1, so the gradient is
    ``-(1/N) * sum_t A_i * grad log pi(y_t)`` over the ``N`` valid tokens. With ``ref_logp`` and
    ``kl_coef > 0`` the k3 KL to the reference policy is added, averaged over the same tokens.
    """
    keep = mask.bool()
    m = keep.float()
    lp = _masked(logp, keep)
    n = _token_count(m, num_tokens)
    ratio = torch.exp(lp - lp.detach())
    loss = -(ratio * advantages.float().unsqueeze(-1) * m).sum() / n
    if ref_logp is not None and kl_coef:
        loss = loss + kl_coef * (k3_kl(lp, _masked(ref_logp, keep)) * m).sum() / n
    return loss


def mopd_loss(
    logp_train: Tensor,
    logp_inf: Tensor,
    logp_teacher: Tensor,
    mask: Tensor,
    eps_low: float = 0.5,
    eps_high: float = 2.0,
    *,
    num_tokens: float | Tensor | None = None,
) -> Tensor:
    """Multi-domain on-policy distillation loss (DESIGN.md §6).

    ``a_t = log pi_teacher - log pi_train`` (stop-gradient) on the sampled tokens; the truncated
    importance weight is ``w_t = sg(pi_train / pi_inf) * 1[eps_low <= ratio <= eps_high]``; the
    loss is ``-(1/|V|) * sum_{t in V} w_t * a_t * log pi_train(y_t)`` over the valid tokens V.
    """
    keep = mask.bool()
    m = keep.float()
    lp = _masked(logp_train, keep)
    n = _token_count(m, num_tokens)
    ratio = torch.exp(lp.detach() - _masked(logp_inf, keep))
    weight = ratio * ((ratio >= eps_low) & (ratio <= eps_high)).float()
    advantage = (_masked(logp_teacher, keep) - lp).detach()
    return -(weight * advantage * lp * m).sum() / n
