"""Loss strategies and advantage estimators: two registries looked up by name; a strategy names its
estimator and declares its log-prob sources; the training loop runs any of them unchanged."""

from __future__ import annotations

from typing import ClassVar

import pytest
import torch

from cascade_envs.trainer.advantages import Advantages, GRPOAdvantages, Skip, advantage_estimators
from cascade_envs.trainer.checks import config_from_dict
from cascade_envs.trainer.config import ConfigError, MOPDConfig, OptimConfig, RolloutConfig
from cascade_envs.trainer.engine import RolloutEngine
from cascade_envs.trainer.loop import Trainer
from cascade_envs.trainer.losses import grpo_loss
from cascade_envs.trainer.strategies import (
    GRPO,
    LossInputs,
    LossStrategy,
    SourceTensors,
    make_strategy,
    register_loss_strategy,
)


class RawRewards:
    """A test estimator: the raw reward as the advantage (0 for masked samples); any group size."""

    uses_rewards = True

    def __init__(self, rollout: RolloutConfig):
        pass

    def __call__(self, rewards, valid):
        return Advantages(tuple(float(r) if ok else 0.0 for r, ok in zip(rewards, valid, strict=True)))


class InferenceAnchored(LossStrategy):
    """A test strategy: REINFORCE on the raw reward, reading the engine's logprobs."""

    advantage = "test-raw"
    sources = frozenset({"inference"})
    seen: ClassVar[list[LossInputs]] = []

    def loss(self, inputs):
        InferenceAnchored.seen.append(inputs)
        inference = inputs.source("inference").logp
        keep = inputs.mask.bool()
        gap = float((inputs.logp.detach() - inference)[keep].abs().max())
        loss = -(inputs.advantages.unsqueeze(-1) * inputs.logp * inputs.mask).sum() / inputs.num_tokens
        return loss, {"train/max_logprob_gap": gap}


advantage_estimators.register("test-raw", RawRewards, replace=True)
register_loss_strategy("test-anchored", InferenceAnchored)


def grpo(**rollout) -> GRPOAdvantages:
    return GRPOAdvantages(RolloutConfig(**rollout))


def test_grpo_group_rules_live_in_its_advantage_estimator():
    estimator = grpo()
    assert estimator([1.0, 1.0, 1.0], [True] * 3) == Skip("all_equal")
    assert estimator([1.0, 0.0, 1.0], [True, False, False]) == Skip("too_few")
    verdict = estimator([1.0, 0.0, 0.5, 9.0], [True, True, True, False])
    assert isinstance(verdict, Advantages)
    assert (
        verdict.values[3] == 0.0
        and verdict.values[0] == pytest.approx(1.0)
        and verdict.values[1] == pytest.approx(-1.0)
    )
    assert grpo(dynamic_filtering=False)([1.0, 1.0], [True, True]) == Advantages((0.0, 0.0))


def test_grpo_rewards_are_compared_in_one_precision():
    # nearly equal rewards: the filter and the advantages must agree on whether they differ
    verdict = grpo()([0.1 + 0.2, 0.3], [True, True])
    assert verdict == Skip("all_equal") or any(a != 0.0 for a in verdict.values)


def test_grpo_loss_strategy_matches_the_public_loss():
    logp = torch.randn(2, 5, requires_grad=True)
    mask = torch.tensor([[1, 1, 0, 1, 0], [1, 1, 1, 1, 1]], dtype=torch.float32)
    advantages = torch.tensor([1.0, -0.5])
    loss, _ = GRPO(OptimConfig(), MOPDConfig()).loss(
        LossInputs(logp, mask, advantages, num_tokens=8.0, num_sequences=2)
    )
    assert torch.equal(loss, grpo_loss(logp, advantages, mask, num_tokens=8.0))


def test_grpo_declares_the_reference_only_with_kl():
    assert GRPO(OptimConfig(), MOPDConfig()).sources == frozenset()
    assert GRPO(OptimConfig(kl_coef=0.03), MOPDConfig()).sources == {"reference"}
    assert make_strategy("grpo", OptimConfig(), MOPDConfig()).advantage == "grpo"


def test_unknown_algorithm_names_the_known_ones():
    with pytest.raises(ConfigError, match=r"algorithm: unknown loss strategy 'grop'.*did you mean 'grpo'"):
        config_from_dict({"algorithm": "grop", "mix": {"envs": {"cascade/MCQA-v0": 1.0}}})


def test_group_size_rule_is_grpos_not_the_loops():
    with pytest.raises(ConfigError, match="GRPO compares rollouts"):
        config_from_dict({"mix": {"envs": {"cascade/MCQA-v0": 1.0}}, "rollout": {"group_size": 1}})
    config = config_from_dict(
        {
            "algorithm": "test-anchored",
            "mix": {"envs": {"cascade/MCQA-v0": 1.0}},
            "rollout": {"group_size": 1},
        }
    )
    assert config.rollout.group_size == 1


def test_the_loop_runs_another_strategy_with_its_sources(tiny_model_dir, tmp_path):
    InferenceAnchored.seen.clear()
    config = config_from_dict(
        {
            "algorithm": "test-anchored",
            "model": {"path": str(tiny_model_dir)},
            "mix": {"envs": {"test/SayYes-v0": 1.0}},
            "rollout": {"group_size": 1, "prompts_per_step": 4, "max_tokens": 6},
            "optim": {"lr": 1e-3, "micro_batch_size": 2},
            "train": {
                "steps": 1,
                "packing": False,  # padded micro-batches of micro_batch_size (packing puts all 4 in one row)
                "output_dir": str(tmp_path / "run"),
                "save_every": 100,
                "tensorboard": False,
                "progress": False,
                "plot": False,
            },
        }
    )
    trainer = Trainer(config)
    metrics = trainer.train_step()
    trainer.close()
    assert set(trainer.sources) == {"inference"}  # the reference is not declared, so not loaded
    assert len(InferenceAnchored.seen) == 2  # two micro-batches of two sequences
    assert metrics["train/max_logprob_gap"] < 1e-4  # the engine sampled with the training weights


def test_rollout_engines_sleep_and_wake_as_no_ops_by_default():
    class Minimal(RolloutEngine):
        pass

    engine = Minimal()
    assert engine.sleep() is None and engine.wake_up() is None


def mopd_strategy(**mopd):
    return make_strategy("mopd", OptimConfig(), MOPDConfig(**mopd))


def test_mopd_is_registered_and_never_leaves_a_group_out():
    from cascade_envs.trainer.advantages import make_estimator

    strategy = mopd_strategy()
    assert type(strategy).__name__ == "MOPD" and strategy.sources == {"inference", "teacher"}
    estimator = make_estimator(strategy.advantage, RolloutConfig(group_size=1))
    assert estimator.uses_rewards is False
    assert estimator([1.0, 1.0, 1.0], [True, False, True]) == Advantages((0.0, 0.0, 0.0))
    assert estimator([0.3], [False]) == Advantages((0.0,))


def test_mopd_strategy_loss_and_metrics_over_micro_batches():
    from cascade_envs.trainer.losses import mopd_loss

    logp = torch.tensor([[-1.0, -2.0, -0.5, 0.0], [-0.2, -0.4, -1.0, -3.0]])
    inf = torch.tensor(
        [[-1.0, float("nan"), -1.5, 0.0], [-0.2, -0.4, -1.0, -3.0]]
    )  # ratio e (gated) at [0, 2]
    teacher = torch.tensor([[-0.5, -1.0, -1.0, 0.0], [-0.1, -0.1, -2.0, -3.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0]])
    top1 = torch.tensor([[1.0, 0.0, 1.0, 1.0], [0.0, 0.0, 0.0, 1.0]])
    strategy = mopd_strategy()
    sums: dict[str, float] = {}
    total = torch.zeros(())
    for rows, env in ((slice(0, 1), "a"), (slice(1, 2), "b")):
        x = logp[rows].clone().requires_grad_(True)
        sources = {"inference": SourceTensors(inf[rows]), "teacher": SourceTensors(teacher[rows], top1[rows])}
        inputs = LossInputs(
            x, mask[rows], torch.zeros(1), num_tokens=7.0, num_sequences=2, sources=sources, env_ids=(env,)
        )
        loss, metrics = strategy.loss(inputs)
        total = total + loss.detach()
        for key, value in metrics.items():
            sums[key] = sums.get(key, 0.0) + float(value)  # the loop reads the sums as floats
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
    sources = {
        "inference": SourceTensors(torch.zeros(1, 2)),
        "teacher": SourceTensors(torch.tensor([[0.0, float("nan")]])),
    }
    inputs = LossInputs(torch.zeros(1, 2), torch.ones(1, 2), torch.zeros(1), 2.0, 1, sources=sources)
    with pytest.raises(ValueError, match="1 trained token"):
        mopd_strategy().loss(inputs)
