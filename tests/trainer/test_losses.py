"""GRPO / MOPD losses against hand-computed references (values and gradients)."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from cascade_envs.trainer.losses import group_advantages, grpo_loss, k3_kl, mopd_loss  # noqa: E402


def test_group_advantages_matches_hand_computation():
    rewards = torch.tensor([[1.0, 0.0, 0.0, 1.0], [0.0, 0.0, 1.0, 0.5]])
    adv = group_advantages(rewards)
    # row 0: mean 0.5, unbiased std sqrt(1/3)
    s = math.sqrt(1 / 3)
    assert torch.allclose(adv[0], torch.tensor([0.5 / s, -0.5 / s, -0.5 / s, 0.5 / s]), atol=1e-6)
    expected = (rewards[1] - rewards[1].mean()) / rewards[1].std()
    assert torch.allclose(adv[1], expected, atol=1e-6)
    assert adv.shape == rewards.shape


def test_constant_groups_get_zeros():
    rewards = torch.tensor([[1.0, 1.0, 1.0], [0.0, 0.0, 0.0], [0.3, 0.3, 0.3]])
    assert torch.equal(group_advantages(rewards), torch.zeros(3, 3))
    assert torch.equal(group_advantages(torch.tensor([[0.7]])), torch.zeros(1, 1))  # G = 1


def test_masked_samples_are_left_out_of_group_statistics():
    rewards = torch.tensor([[1.0, 0.0, 123.0, float("nan")]])
    valid = torch.tensor([[True, True, False, True]])
    adv = group_advantages(rewards, valid)
    s = math.sqrt(0.5)
    assert torch.allclose(adv, torch.tensor([[0.5 / s, -0.5 / s, 0.0, 0.0]]), atol=1e-6)
    # only one valid sample left: nothing to compare against
    assert torch.equal(group_advantages(rewards, torch.tensor([[True, False, False, False]])), torch.zeros(1, 4))


def test_group_advantages_rejects_wrong_shape():
    with pytest.raises(ValueError, match="groups, G"):
        group_advantages(torch.zeros(4))


def test_grpo_loss_value_and_gradient():
    logp = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, -0.25, 0.0]], requires_grad=True)
    adv = torch.tensor([2.0, -1.0])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    loss = grpo_loss(logp, adv, mask)
    # ratio is exactly 1: loss = -(sum_i A_i * n_i) / N = -(2*2 - 1*1) / 3
    assert loss.item() == pytest.approx(-1.0)
    loss.backward()
    expected = -torch.tensor([[2.0, 2.0, 0.0], [-1.0, 0.0, 0.0]]) / 3
    assert torch.allclose(logp.grad, expected)


def test_grpo_loss_ignores_nan_in_padding():
    logp = torch.tensor([[-1.0, float("nan")]], requires_grad=True)
    loss = grpo_loss(logp, torch.tensor([1.0]), torch.tensor([[1, 0]]))
    loss.backward()
    assert math.isfinite(loss.item())
    assert torch.equal(logp.grad, torch.tensor([[-1.0, 0.0]]))


def test_grpo_loss_micro_batches_sum_to_full_batch_gradient():
    torch.manual_seed(0)
    base = torch.randn(4, 5)
    adv = torch.randn(4)
    mask = (torch.rand(4, 5) > 0.3).int()
    full = base.clone().requires_grad_(True)
    grpo_loss(full, adv, mask).backward()
    parts = base.clone().requires_grad_(True)
    n = mask.sum()
    for rows in (slice(0, 1), slice(1, 4)):
        grpo_loss(parts[rows], adv[rows], mask[rows], num_tokens=n).backward()
    assert torch.allclose(full.grad, parts.grad, atol=1e-7)


def test_grpo_loss_with_k3_kl():
    logp = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    ref = torch.tensor([[-1.5, -1.0]])
    mask = torch.tensor([[1, 1]])
    loss = grpo_loss(logp, torch.tensor([0.0]), mask, ref_logp=ref, kl_coef=0.1)
    d = ref - logp.detach()
    kl = torch.exp(d) - d - 1
    assert loss.item() == pytest.approx(0.1 * kl.mean().item(), rel=1e-6)
    loss.backward()
    # d/dlogp [exp(ref - logp) - (ref - logp) - 1] = -exp(ref - logp) + 1
    assert torch.allclose(logp.grad, 0.1 * (1 - torch.exp(d)) / 2, atol=1e-7)
    assert (k3_kl(logp.detach(), ref) >= 0).all()
    # kl_coef 0 ignores the reference entirely
    assert grpo_loss(logp, torch.tensor([0.0]), mask, ref_logp=ref).item() == 0.0


def test_grpo_loss_bf16_inputs():
    logp32 = torch.tensor([[-1.0, -2.0, -0.5]])
    logp = logp32.bfloat16().requires_grad_(True)
    loss = grpo_loss(logp, torch.tensor([1.5]), torch.tensor([[1, 1, 1]]))
    assert loss.dtype == torch.float32
    assert loss.item() == pytest.approx(-1.5)
    loss.backward()
    assert logp.grad.dtype == torch.bfloat16
    assert torch.allclose(logp.grad.float(), torch.full((1, 3), -0.5))


def test_mopd_loss_value_gradient_and_truncation():
    logp_train = torch.tensor([[-1.0, -2.0, -0.5, -1.0]], requires_grad=True)
    logp_inf = torch.tensor([[-1.0, -1.0, -1.5, -1.2]])  # ratios: 1, e^-1 (<0.5), e^1 (>2), e^0.2
    logp_teacher = torch.tensor([[-0.5, -1.0, -1.0, -3.0]])
    mask = torch.tensor([[1, 1, 1, 1]])
    loss = mopd_loss(logp_train, logp_inf, logp_teacher, mask)
    w = torch.tensor([1.0, 0.0, 0.0, math.exp(0.2)])
    a = torch.tensor([0.5, 1.0, -0.5, -2.0])
    lp = logp_train.detach()[0]
    assert loss.item() == pytest.approx(-(w * a * lp).sum().item() / 4, rel=1e-6)
    loss.backward()
    assert torch.allclose(logp_train.grad[0], -(w * a) / 4, atol=1e-6)


def test_mopd_loss_respects_mask_and_custom_bounds():
    logp_train = torch.tensor([[-1.0, -1.0]], requires_grad=True)
    logp_inf = torch.tensor([[-1.0, -2.0]])  # ratio 1 and e (~2.72)
    logp_teacher = torch.tensor([[0.0, 0.0]])
    loss = mopd_loss(logp_train, logp_inf, logp_teacher, torch.tensor([[1, 0]]))
    assert loss.item() == pytest.approx(-(1.0 * 1.0 * -1.0))
    wide = mopd_loss(logp_train, logp_inf, logp_teacher, torch.tensor([[1, 1]]), eps_high=3.0)
    assert wide.item() == pytest.approx((1.0 + math.e) / 2, rel=1e-6)
