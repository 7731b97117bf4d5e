"""Loss strategies: looked up by name, own their group rules, declare their log-prob sources; the
training loop runs any of them unchanged."""

from __future__ import annotations

from typing import ClassVar

import pytest
import torch

from cascade_envs.trainer.config import Config, ConfigError, config_from_dict
from cascade_envs.trainer.engine import RolloutEngine
from cascade_envs.trainer.grpo import GRPOTrainer
from cascade_envs.trainer.losses import grpo_loss
from cascade_envs.trainer.strategies import FILTERED, GRPO, TOO_FEW, LossInputs, LossStrategy, loss_strategies


class InferenceAnchored(LossStrategy):
    """A test strategy: REINFORCE on the raw reward, reading the engine's logprobs; any group size."""

    name = "test-anchored"
    sources = frozenset({"inference"})
    seen: ClassVar[list[LossInputs]] = []

    def group_advantages(self, rewards, valid):
        return [float(r) if ok else 0.0 for r, ok in zip(rewards, valid, strict=True)]

    def loss(self, inputs):
        InferenceAnchored.seen.append(inputs)
        assert inputs.inference_logp is not None
        keep = inputs.mask.bool()
        gap = float((inputs.logp.detach() - inputs.inference_logp)[keep].abs().max())
        loss = -(inputs.advantages.unsqueeze(-1) * inputs.logp * inputs.mask).sum() / inputs.num_tokens
        return loss, {"train/max_logprob_gap": gap}


loss_strategies.register("test-anchored", InferenceAnchored, replace=True)


def grpo(**rollout) -> GRPO:
    config = Config()
    for key, value in rollout.items():
        setattr(config.rollout, key, value)
    return GRPO(config)


def test_grpo_group_rules_live_in_the_strategy():
    strategy = grpo()
    assert strategy.group_advantages([1.0, 1.0, 1.0], [True] * 3) == FILTERED
    assert strategy.group_advantages([1.0, 0.0, 1.0], [True, False, False]) == TOO_FEW
    advantages = strategy.group_advantages([1.0, 0.0, 0.5, 9.0], [True, True, True, False])
    assert advantages[3] == 0.0 and advantages[0] == pytest.approx(1.0) and advantages[1] == pytest.approx(-1.0)
    assert grpo(dynamic_filtering=False).group_advantages([1.0, 1.0], [True, True]) == [0.0, 0.0]


def test_grpo_rewards_are_compared_in_one_precision():
    # nearly equal rewards: the filter and the advantages must agree on whether they differ
    rewards = [0.1 + 0.2, 0.3]
    advantages = grpo().group_advantages(rewards, [True, True])
    assert advantages == FILTERED or any(a != 0.0 for a in advantages)


def test_grpo_loss_strategy_matches_the_public_loss():
    logp = torch.randn(2, 5, requires_grad=True)
    mask = torch.tensor([[1, 1, 0, 1, 0], [1, 1, 1, 1, 1]], dtype=torch.float32)
    advantages = torch.tensor([1.0, -0.5])
    loss, _ = grpo().loss(LossInputs(logp, mask, advantages, num_tokens=8.0, num_sequences=2))
    assert torch.equal(loss, grpo_loss(logp, advantages, mask, num_tokens=8.0))


def test_grpo_declares_the_reference_only_with_kl():
    config = Config()
    assert GRPO(config).sources == frozenset()
    config.optim.kl_coef = 0.03
    assert GRPO(config).sources == {"reference"}


def test_unknown_algorithm_names_the_known_ones():
    with pytest.raises(ConfigError, match=r"algorithm: unknown loss strategy 'grop'.*did you mean 'grpo'"):
        config_from_dict({"algorithm": "grop", "mix": {"envs": {"cascade/MCQA-v0": 1.0}}})


def test_group_size_rule_is_grpos_not_the_loops():
    with pytest.raises(ConfigError, match="GRPO compares rollouts"):
        config_from_dict({"mix": {"envs": {"cascade/MCQA-v0": 1.0}}, "rollout": {"group_size": 1}})
    config = config_from_dict({"algorithm": "test-anchored", "mix": {"envs": {"cascade/MCQA-v0": 1.0}},
                               "rollout": {"group_size": 1}})
    assert config.rollout.group_size == 1


def test_the_loop_runs_another_strategy_with_its_sources(tiny_model_dir, tmp_path):
    InferenceAnchored.seen.clear()
    config = config_from_dict({
        "algorithm": "test-anchored",
        "model": {"path": str(tiny_model_dir)},
        "mix": {"envs": {"test/SayYes-v0": 1.0}},
        "rollout": {"group_size": 1, "prompts_per_step": 4, "max_tokens": 6},
        "optim": {"lr": 1e-3, "micro_batch_size": 2},
        "train": {"steps": 1, "output_dir": str(tmp_path / "run"), "save_every": 100,
                  "tensorboard": False, "progress": False, "plot": False},
    })
    trainer = GRPOTrainer(config)
    metrics = trainer.train_step()
    trainer.close()
    assert trainer.ref_model is None  # not declared, not loaded
    assert len(InferenceAnchored.seen) == 2  # two micro-batches of two sequences
    assert metrics["train/max_logprob_gap"] < 1e-4  # the engine sampled with the training weights


def test_rollout_engines_sleep_and_wake_as_no_ops_by_default():
    class Minimal(RolloutEngine):
        pass

    engine = Minimal()
    assert engine.sleep() is None and engine.wake_up() is None


def mopd_strategy(**mopd):
    from cascade_envs.trainer.strategies import MOPD

    config = Config()
    for key, value in mopd.items():
        setattr(config.mopd, key, value)
    return MOPD(config)


def test_mopd_is_registered_and_never_leaves_a_group_out():
    strategy = mopd_strategy()
    assert loss_strategies.get("mopd") is type(strategy)
    assert strategy.sources == {"inference", "teacher"} and strategy.uses_rewards is False
    assert strategy.group_advantages([1.0, 1.0, 1.0], [True, False, True]) == [0.0, 0.0, 0.0]
    assert strategy.group_advantages([0.3], [False]) == [0.0]


def test_mopd_strategy_loss_and_metrics_over_micro_batches():
    from cascade_envs.trainer.losses import mopd_loss

    logp = torch.tensor([[-1.0, -2.0, -0.5, 0.0], [-0.2, -0.4, -1.0, -3.0]])
    inf = torch.tensor([[-1.0, float("nan"), -1.5, 0.0], [-0.2, -0.4, -1.0, -3.0]])  # ratio e (gated) at [0, 2]
    teacher = torch.tensor([[-0.5, -1.0, -1.0, 0.0], [-0.1, -0.1, -2.0, -3.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0]])
    top1 = torch.tensor([[1.0, 0.0, 1.0, 1.0], [0.0, 0.0, 0.0, 1.0]])
    strategy = mopd_strategy()
    sums: dict[str, float] = {}
    total = torch.zeros(())
    for rows, env in ((slice(0, 1), "a"), (slice(1, 2), "b")):
        x = logp[rows].clone().requires_grad_(True)
        inputs = LossInputs(x, mask[rows], torch.zeros(1), num_tokens=7.0, num_sequences=2, inference_logp=inf[rows],
                            teacher_logp=teacher[rows], teacher_top1=top1[rows], env_ids=(env,))
        loss, metrics = strategy.loss(inputs)
        total = total + loss.detach()
        for key, value in metrics.items():
            sums[key] = sums.get(key, 0.0) + value
    out = strategy.finish_metrics(sums)
    # the missing inference log-prob counts as ratio 1: the same loss as with inf = logp there
    filled = torch.where(torch.isnan(inf), logp, inf)
    assert total.item() == pytest.approx(mopd_loss(logp, filled, teacher, mask).item(), rel=1e-6)
    assert out["mopd/tokens_without_inference_logprob"] == 1.0
    assert out["mopd/gated_fraction"] == pytest.approx(1 / 7)
    assert out["mopd/teacher_top1_agreement"] == pytest.approx(3 / 7)  # the padded [0, 3] does not count
    a = (teacher - logp) * mask
    assert out["mopd/reverse_kl"] == pytest.approx(-a.sum().item() / 7)
    assert out["mopd/advantage_mean/a"] == pytest.approx(a[0].sum().item() / 3)
    assert out["mopd/advantage_mean/b"] == pytest.approx(a[1].sum().item() / 4)
    assert not any(key.startswith("mopd/_") for key in out)


def test_mopd_refuses_tokens_the_teacher_did_not_score():
    inputs = LossInputs(torch.zeros(1, 2), torch.ones(1, 2), torch.zeros(1), 2.0, 1, inference_logp=torch.zeros(1, 2),
                        teacher_logp=torch.tensor([[0.0, float("nan")]]))
    with pytest.raises(ValueError, match="1 trained token"):
        mopd_strategy().loss(inputs)
