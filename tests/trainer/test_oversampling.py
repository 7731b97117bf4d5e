"""Full batches under dynamic filtering: adaptive oversampling, the fill ratio, the one-time warning."""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

import pytest

from cascade_envs import Env, Episode, Reward
from cascade_envs.core import Completion
from cascade_envs.mix import EnvMix
from cascade_envs.policy import SamplingParams
from cascade_envs.trainer.advantages import GRPOAdvantages
from cascade_envs.trainer.batch import BatchBuilder, KeepRate
from cascade_envs.trainer.checks import load_config
from cascade_envs.trainer.config import ConfigError, RolloutConfig
from cascade_envs.trainer.engine import RolloutEngine
from cascade_envs.trainer.metrics import rollout_metrics

GROUP = 4


class ScriptedEngine(RolloutEngine):
    """Answers every prompt with one token; counts the generations."""

    def __init__(self) -> None:
        self.calls = 0

    async def agenerate(
        self, messages: Any, *, sampling: SamplingParams, thinking: bool = True
    ) -> Completion:
        self.calls += 1
        return Completion(
            "answer", finish_reason="stop", token_ids=[7], logprobs=[-0.5], prompt_token_ids=[1, 2, 3]
        )

    def sync_weights(self, model: Any) -> None:
        pass


class HalfFlatEnv(Env):
    """Tasks ``v*`` give each group rewards 1, 0, 1, 0 (a learning signal); ``f*`` give all 0.5 (filtered)."""

    thinking = False

    def __init__(self, **kwargs: Any):
        self.scored: Counter[str] = Counter()
        super().__init__(**kwargs)

    async def ascore_episode(self, episode: Episode, answer: str) -> Reward:
        if episode.task_id.startswith("f"):
            return Reward(0.5)
        self.scored[episode.task_id] += 1
        return Reward(float(self.scored[episode.task_id] % 2))


def half_flat_tasks(varied: int = 6, flat: int = 6) -> list[dict[str, Any]]:
    return [{"id": f"v{i}", "prompt": f"question {i}"} for i in range(varied)] + [
        {"id": f"f{i}", "prompt": f"flat question {i}"} for i in range(flat)
    ]


@pytest.fixture(scope="module", autouse=True)
def _register() -> None:
    import cascade_envs

    cascade_envs.register("test/HalfFlat-v0", HalfFlatEnv, tasks=half_flat_tasks())
    cascade_envs.register("test/AllVaried-v0", HalfFlatEnv, tasks=half_flat_tasks(flat=0))


def make_builder(env_id: str, *, max_oversampling: float, max_rounds: int, prompts: int = 4) -> BatchBuilder:
    rollout = RolloutConfig(
        max_tokens=4,
        group_size=GROUP,
        prompts_per_step=prompts,
        max_rounds=max_rounds,
        max_oversampling=max_oversampling,
    )
    return BatchBuilder(ScriptedEngine(), EnvMix({env_id: 1.0}, seed=0), GRPOAdvantages(rollout), rollout)


def mean_fill(builder: BatchBuilder, steps: int) -> float:
    return sum(builder.build().fill_ratio for _ in range(steps)) / steps


def test_keep_rate_estimate_sizes_rounds_within_the_oversampling_bound():
    rate = KeepRate(max_oversampling=2.0)
    assert rate.prompts_for(4) == 5  # seeded at 0.75: a first step already plays one spare prompt
    rate.update(kept=2, played=4)  # 0.5 * 0.5 + 0.5 * 0.75
    assert rate.value == pytest.approx(0.625)
    assert rate.prompts_for(4) == 6
    for _ in range(10):
        rate.update(kept=0, played=8)
    assert rate.value == 0.5 and rate.prompts_for(4) == 8 and rate.prompts_for(1) == 2  # never past 2x
    for _ in range(20):
        rate.update(kept=8, played=8)
    assert rate.prompts_for(4) == 4  # nothing filtered: no oversampling left
    exact = KeepRate(max_oversampling=1.0)
    exact.update(kept=0, played=8)
    assert exact.prompts_for(3) == 3
    with pytest.raises(ValueError, match="at least 1"):
        KeepRate(max_oversampling=0.5)


def test_oversampling_fills_batches_that_refilling_the_shortfall_leaves_short():
    # the old rule: play exactly the shortfall, one round -> about half the groups are kept
    old = mean_fill(make_builder("test/HalfFlat-v0", max_oversampling=1.0, max_rounds=1), steps=12)
    # oversampled up front at the observed keep rate: one round nearly fills, two fill
    one_round = mean_fill(make_builder("test/HalfFlat-v0", max_oversampling=2.0, max_rounds=1), steps=12)
    two_rounds = mean_fill(make_builder("test/HalfFlat-v0", max_oversampling=2.0, max_rounds=2), steps=12)
    # (the mix draws tasks at random, so a round can draw mostly flat ones; the seeds are fixed)
    assert old < 0.65
    assert one_round > old + 0.15
    assert two_rounds >= 0.85


def test_each_round_plays_the_shortfall_over_the_keep_rate_and_no_more_than_the_bound():
    builder = make_builder("test/HalfFlat-v0", max_oversampling=2.0, max_rounds=3)
    sizes: list[tuple[int, int]] = []
    sample = builder.mix.sample

    def spy(n: int) -> list[Any]:
        sizes.append((n, builder.prompts_per_step - kept[0]))
        return sample(n)

    kept = [0]
    builder.mix.sample = spy  # type: ignore[method-assign]
    for _ in range(6):
        kept[0] = 0
        batch = builder.build()
        assert len(batch.played) == sum(n for n, _ in sizes[-batch.rounds :])
        assert len(batch.played) == (
            len(batch.groups)
            + batch.groups_surplus
            + batch.groups_filtered
            + batch.groups_masked
            + batch.groups_below_threshold
        )
    assert sizes[0] == (5, 4)  # first round of the run: 4 / 0.75
    for asked, needed_at_most in sizes:
        assert asked <= 2 * needed_at_most
    assert any(n > 4 for n, _ in sizes[1:])  # later steps oversample at the ~0.5 rate they saw


def test_surplus_groups_are_played_but_not_trained_and_the_batch_has_exactly_the_asked_groups():
    builder = make_builder("test/AllVaried-v0", max_oversampling=2.0, max_rounds=2)
    batch = builder.build()
    assert len(batch.played) == 5 and batch.rounds == 1
    assert len(batch.groups) == 4 and batch.groups_surplus == 1
    assert len(batch.sequences) == 4 * GROUP
    assert batch.fill_ratio == 1.0
    metrics = rollout_metrics(batch)
    assert metrics["batch/fill_ratio"] == 1.0 and metrics["batch/groups_surplus"] == 1.0


def test_a_short_batch_warns_once_naming_the_settings(caplog):
    builder = make_builder("test/HalfFlat-v0", max_oversampling=1.0, max_rounds=1)
    with caplog.at_level(logging.WARNING, logger="cascade_envs.trainer"):
        fills = [builder.build().fill_ratio for _ in range(6)]
    assert sum(f < 1 for f in fills) >= 2
    warnings = [r.getMessage() for r in caplog.records if "fill ratio" in r.getMessage()]
    assert len(warnings) == 1
    assert "rollout.max_oversampling" in warnings[0] and "rollout.max_rounds" in warnings[0]


def test_full_batches_do_not_warn(caplog):
    builder = make_builder("test/AllVaried-v0", max_oversampling=2.0, max_rounds=1)
    with caplog.at_level(logging.WARNING, logger="cascade_envs.trainer"):
        assert [builder.build().fill_ratio for _ in range(3)] == [1.0, 1.0, 1.0]
    assert not [r for r in caplog.records if "fill ratio" in r.getMessage()]


def test_max_oversampling_is_read_from_config_and_checked():
    assert load_config(None, ["rollout.max_oversampling=3"]).rollout.max_oversampling == 3.0
    assert load_config(None, ["rollout.max_oversampling=1"]).rollout.max_oversampling == 1.0
    for bad in ("0.5", ".nan", "100"):
        with pytest.raises(ConfigError, match=r"rollout\.max_oversampling"):
            load_config(None, [f"rollout.max_oversampling={bad}"])
