"""``rollout.mask_groups_below``: groups where no rollout scores above a threshold are left out of the
loss (the agentless SWE RL stage masks prompts where no rollout scores > 0.5), and counted."""

from __future__ import annotations

import pytest
import torch

from cascade_envs.mix import EnvMix
from cascade_envs.trainer.advantages import Advantages, GRPOAdvantages, Skip
from cascade_envs.trainer.batch import BatchBuilder
from cascade_envs.trainer.checks import load_config
from cascade_envs.trainer.config import Config, ConfigError, RolloutConfig
from cascade_envs.trainer.engine import HFEngine
from cascade_envs.trainer.metrics import rollout_metrics
from tests.trainer.toys import tiny_model, tiny_tokenizer

BELOW_THRESHOLD = Skip("below_threshold")


def grpo(mask: float | None = 0.5, dynamic_filtering: bool = True) -> GRPOAdvantages:
    return GRPOAdvantages(RolloutConfig(mask_groups_below=mask, dynamic_filtering=dynamic_filtering))


def test_a_group_with_no_reward_above_the_threshold_is_left_out():
    estimator = grpo(0.5)
    assert estimator([0.5, 0.2, 0.0, 0.4], [True] * 4) == BELOW_THRESHOLD  # 0.5 is not above
    verdict = estimator([0.51, 0.2, 0.0, 0.4], [True] * 4)
    assert isinstance(verdict, Advantages) and verdict.values[0] > 0
    assert estimator([-1.0, 0.3], [True, True]) == BELOW_THRESHOLD  # SWE-RL format errors: -1


def test_only_scored_rollouts_count():
    # the 0.9 was masked (a judge failure): it cannot lift the group over the threshold
    assert grpo(0.5)([0.9, 0.1, 0.2], [False, True, True]) == BELOW_THRESHOLD
    assert grpo(0.5)([0.9, 0.1, 0.2], [True, False, True]) != BELOW_THRESHOLD


def test_dynamic_filtering_and_too_few_are_reported_first_so_counts_do_not_overlap():
    assert grpo(0.5)([0.0, 0.0, 0.0], [True] * 3) == Skip("all_equal")
    assert grpo(0.5)([0.1, 0.2], [True, False]) == Skip("too_few")
    assert grpo(0.5, dynamic_filtering=False)([0.0, 0.0], [True, True]) == BELOW_THRESHOLD


def test_off_by_default_and_unchanged_when_off():
    assert Config().rollout.mask_groups_below is None
    rewards, valid = [0.1, 0.3, 0.2], [True] * 3
    assert grpo(None)(rewards, valid) == grpo(-5.0)(rewards, valid)
    assert isinstance(grpo(None)(rewards, valid), Advantages)


def test_the_option_is_read_from_config_and_checked():
    assert load_config(None, ["rollout.mask_groups_below=0.5"]).rollout.mask_groups_below == 0.5
    assert load_config(None, ["rollout.mask_groups_below=1"]).rollout.mask_groups_below == 1.0
    assert load_config(None, ["rollout.mask_groups_below=null"]).rollout.mask_groups_below is None
    with pytest.raises(ConfigError, match=r"rollout\.mask_groups_below"):
        load_config(None, ["rollout.mask_groups_below=high"])
    with pytest.raises(ConfigError, match=r"rollout\.mask_groups_below must be a finite number"):
        load_config(None, ["rollout.mask_groups_below=.nan"])


@pytest.fixture
def engine() -> HFEngine:
    torch.manual_seed(0)
    tok = tiny_tokenizer()
    model = tiny_model(len(tok))
    model.generation_config.eos_token_id = tok.eos_token_id
    return HFEngine(model, tok)


def build(engine: HFEngine, mask: float | None, max_rounds: int):
    rollout = RolloutConfig(
        mask_groups_below=mask, max_tokens=6, group_size=4, prompts_per_step=3, max_rounds=max_rounds
    )
    builder = BatchBuilder(engine, EnvMix({"test/SayYes-v0": 1.0}, seed=0), GRPOAdvantages(rollout), rollout)
    return builder.build()


def test_the_batch_builder_leaves_such_groups_out_and_counts_them_in_the_step_metrics(engine: HFEngine):
    # SayYes rewards are fractions of "yes" words, at most 1: with the threshold at 1 no group passes
    batch = build(engine, 1.0, max_rounds=2)
    informative = [g for g in batch.played if len({e.reward.value for e in g.episodes}) > 1]
    assert informative, "the untrained model should give some groups differing rewards"
    assert batch.empty and batch.groups == []
    assert batch.groups_below_threshold == len(informative) and batch.rounds == 2
    assert len(batch.played) == batch.groups_filtered + batch.groups_below_threshold + batch.groups_masked
    metrics = rollout_metrics(batch)
    assert metrics["batch/groups_below_threshold"] == float(len(informative))
    assert metrics["batch/groups_kept"] == 0.0
    # off: the same informative groups train
    kept = build(engine, None, max_rounds=2)
    assert kept.groups_below_threshold == 0 and rollout_metrics(kept)["batch/groups_below_threshold"] == 0.0
    assert all(max(e.reward.value for e in g.episodes) <= 1.0 for g in kept.groups) and kept.groups
