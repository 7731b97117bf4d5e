"""GRPO and MOPD losses (DESIGN.md §6), public so they can be checked on their own.

Per-token tensors are ``[batch, tokens]`` log-probabilities of the *sampled* tokens; ``mask`` is 1
on valid response tokens and 0 on padding (and on anything else that is not trained).

Normalisation: ``grpo_loss`` divides by the number of valid tokens of the whole batch (token-level,
as the report's GRPO objective). ``mopd_loss`` follows eq. 4 of the report by default: the mean over
each response's own valid tokens, then the mean over responses (``normalization="response"``);
``"token"`` divides by all valid tokens of the batch instead. When a batch is split into
micro-batches for gradient accumulation, pass the batch-wide count (``num_tokens``, or
``num_sequences`` for response normalisation) so that the summed micro-batch gradients equal the
full-batch gradient.

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


NORMALIZATIONS = ("response", "token")


def importance_weight(
    logp_train: Tensor, logp_inf: Tensor, keep: Tensor, eps_low: float, eps_high: float
) -> tuple[Tensor, Tensor]:
    """MOPD's truncated importance weight ``sg(pi_train / pi_inf) * 1[eps_low <= ratio <= eps_high]``.

    Returns ``(weight, gated)``; ``gated`` marks valid tokens the gate removed. Where the inference
    log-prob is missing (NaN: the engine reported none) the ratio cannot be computed and is taken
    as 1, so such a token is trained unweighted (the MOPD strategy counts these tokens).
    """
    known = keep & torch.isfinite(logp_inf)
    ratio = torch.exp(_masked(logp_train, keep) - _masked(logp_inf, known)).detach()
    ratio = torch.where(known, ratio, torch.ones_like(ratio))
    inside = (ratio >= eps_low) & (ratio <= eps_high)
    return ratio * inside.float(), keep & ~inside


def mopd_loss(
    logp_train: Tensor,
    logp_inf: Tensor,
    logp_teacher: Tensor,
    mask: Tensor,
    eps_low: float = 0.5,
    eps_high: float = 2.0,
    *,
    normalization: str = "response",
    num_tokens: float | Tensor | None = None,
    num_sequences: float | Tensor | None = None,
) -> Tensor:
    """Multi-domain on-policy distillation loss (DESIGN.md §6, eq. 4 of the report).

    ``a_t = log pi_teacher - log pi_train`` (stop-gradient) on the sampled tokens; the truncated
    importance weight is ``w_t = sg(pi_train / pi_inf) * 1[eps_low <= ratio <= eps_high]`` (ratio 1
    where ``logp_inf`` is NaN); per response the loss is ``-(1/|V(y)|) * sum_{t in V(y)} w_t * a_t *
    log pi_train(y_t)``, averaged over the responses that have at least one valid token
    (``num_sequences``: that count over the whole step, for micro-batches). A response without a
    valid token contributes 0 and does not count. ``normalization="token"`` divides the sum over
    every valid token by the batch's valid-token count (``num_tokens``) instead, which weights long
    responses more.
    """
    if normalization not in NORMALIZATIONS:
        raise ValueError(f"normalization must be one of {NORMALIZATIONS}, got {normalization!r}")
    keep = mask.bool()
    m = keep.float()
    lp = _masked(logp_train, keep)
    weight, _ = importance_weight(logp_train, logp_inf, keep, eps_low, eps_high)
    advantage = (_masked(logp_teacher, keep) - lp).detach()
    per_token = weight * advantage * lp * m
    if normalization == "token":
        return -per_token.sum() / _token_count(m, num_tokens)
    lengths = m.sum(dim=-1)
    per_response = per_token.sum(dim=-1) / lengths.clamp(min=1.0)
    if num_sequences is None:
        count = (lengths > 0).float().sum()
    else:
        count = torch.as_tensor(num_sequences, dtype=torch.float32)
    return -per_response.sum() / count.clamp(min=1.0)
