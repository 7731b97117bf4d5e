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
    assert torch.equal(
        group_advantages(rewards, torch.tensor([[True, False, False, False]])), torch.zeros(1, 4)
    )


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


def mopd_reference(lp, inf, teacher, mask, eps_low=0.5, eps_high=2.0, normalization="response"):
    """eq. 4 written out token by token in plain Python: the loss and d loss / d logp_train."""
    rows = []
    for lp_i, inf_i, t_i, m_i in zip(lp, inf, teacher, mask, strict=True):
        terms, g_row = [], []
        for x, q, t, m in zip(lp_i, inf_i, t_i, m_i, strict=True):
            if not m:
                g_row.append(0.0)
                continue
            ratio = 1.0 if math.isnan(q) else math.exp(x - q)
            w = ratio if eps_low <= ratio <= eps_high else 0.0
            terms.append(w * (t - x) * x)
            g_row.append(w * (t - x))
        rows.append((terms, g_row))
    if normalization == "token":
        n = sum(len(terms) for terms, _ in rows)
        loss = -sum(sum(terms) for terms, _ in rows) / n
        return loss, [[-g / n for g in g_row] for _, g_row in rows]
    counted = sum(1 for terms, _ in rows if terms)
    loss = -sum(sum(terms) / len(terms) for terms, _ in rows if terms) / counted
    return loss, [[-g / max(len(terms), 1) / counted for g in g_row] for terms, g_row in rows]


def _mopd_case(lengths=(3, 10), width=10, seed=0):
    gen = torch.Generator().manual_seed(seed)
    lp = -torch.rand(len(lengths), width, generator=gen) * 2
    inf = lp + (torch.rand(len(lengths), width, generator=gen) - 0.5) * 1.8  # some ratios outside [0.5, 2]
    teacher = -torch.rand(len(lengths), width, generator=gen) * 3
    mask = torch.zeros(len(lengths), width)
    for row, n in enumerate(lengths):
        mask[row, :n] = 1
    return lp, inf, teacher, mask


@pytest.mark.parametrize("normalization", ["response", "token"])
def test_mopd_loss_matches_the_formula_written_out(normalization):
    lp, inf, teacher, mask = _mopd_case((3, 10, 0, 7))
    inf[1, 4] = float("nan")  # no inference log-prob: ratio 1
    x = lp.clone().requires_grad_(True)
    loss = mopd_loss(x, inf, teacher, mask, normalization=normalization)
    loss.backward()
    ref_loss, ref_grad = mopd_reference(
        lp.tolist(), inf.tolist(), teacher.tolist(), mask.tolist(), normalization=normalization
    )
    assert loss.item() == pytest.approx(ref_loss, rel=1e-5, abs=1e-7)
    assert torch.allclose(x.grad, torch.tensor(ref_grad), atol=1e-6)
    assert x.grad[2].abs().sum() == 0  # the response with no valid token contributes nothing


def test_mopd_per_response_gradient_differs_from_token_normalisation():
    # two responses of 3 and 10 tokens, every weight 1: per response each token weighs 1/(2*|y|),
    # per batch token 1/13, so the short response's tokens weigh 13/6 times more
    lp, _, teacher, mask = _mopd_case((3, 10))
    grads = {}
    for normalization in ("response", "token"):
        x = lp.clone().requires_grad_(True)
        mopd_loss(x, lp, teacher, mask, normalization=normalization).backward()
        grads[normalization] = x.grad
    a = teacher - lp
    assert torch.allclose(grads["response"][0, :3], -a[0, :3] / 6, atol=1e-6)
    assert torch.allclose(grads["response"][1], -a[1] / 20, atol=1e-6)
    assert torch.allclose(grads["token"][:, :10] * mask, -a * mask / 13, atol=1e-6)
    assert (grads["response"] - grads["token"]).abs().max() > 0.1 * grads["token"].abs().max()


@pytest.mark.parametrize("normalization", ["response", "token"])
def test_mopd_micro_batches_sum_to_the_batch_gradient(normalization):
    lp, inf, teacher, mask = _mopd_case((3, 10, 5, 0, 8), seed=3)
    full = lp.clone().requires_grad_(True)
    mopd_loss(full, inf, teacher, mask, normalization=normalization).backward()
    parts = lp.clone().requires_grad_(True)
    total = torch.zeros(())
    counts = {"num_tokens": mask.sum(), "num_sequences": int((mask.sum(-1) > 0).sum())}
    for rows in (slice(0, 2), slice(2, 3), slice(3, 5)):
        part = mopd_loss(
            parts[rows], inf[rows], teacher[rows], mask[rows], normalization=normalization, **counts
        )
        part.backward()
        total = total + part.detach()
    assert torch.allclose(full.grad, parts.grad, atol=1e-7)
    assert total.item() == pytest.approx(
        mopd_loss(lp, inf, teacher, mask, normalization=normalization).item(), rel=1e-6
    )


def test_mopd_advantage_and_weight_carry_no_gradient():
    lp, inf, teacher, mask = _mopd_case((4, 6))
    x = lp.clone().requires_grad_(True)
    q = inf.clone().requires_grad_(True)
    t = teacher.clone().requires_grad_(True)
    mopd_loss(x, q, t, mask).backward()
    assert q.grad is None and t.grad is None
    # d/dx of -w * a * x with w and a held constant is -w * a (per response scaling aside)
    _, ref_grad = mopd_reference(lp.tolist(), inf.tolist(), teacher.tolist(), mask.tolist())
    assert torch.allclose(x.grad, torch.tensor(ref_grad), atol=1e-6)


def test_mopd_gate_removes_tokens_outside_the_bounds():
    lp = torch.tensor([[-1.0, -1.0, -1.0, -1.0, -1.0]], requires_grad=True)
    # ratios e^0.8 (2.23, out), e^0.6 (1.82, in), 1, e^-0.6 (0.55, in), e^-0.8 (0.45, out)
    inf = torch.tensor([[-1.8, -1.6, -1.0, -0.4, -0.2]])
    teacher = torch.zeros(1, 5)
    mopd_loss(lp, inf, teacher, torch.ones(1, 5)).backward()
    kept = lp.grad[0] != 0
    assert kept.tolist() == [False, True, True, True, False]
    lp.grad = None
    mopd_loss(lp, inf, teacher, torch.ones(1, 5), eps_low=0.4, eps_high=2.5).backward()
    assert bool((lp.grad != 0).all())


def test_mopd_loss_rejects_an_unknown_normalisation():
    with pytest.raises(ValueError, match="normalization"):
        mopd_loss(
            torch.zeros(1, 1), torch.zeros(1, 1), torch.zeros(1, 1), torch.ones(1, 1), normalization="batch"
        )
