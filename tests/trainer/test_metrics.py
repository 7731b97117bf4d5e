"""Step metrics from a hand-built rollout batch; the JSONL log; the reward table and plot."""

from __future__ import annotations

from cascade_envs.core import Completion, Reward
from cascade_envs.rollout.runner import EpisodeResult, GroupResult
from cascade_envs.trainer.batch import RolloutBatch
from cascade_envs.trainer.metrics import MetricsLogger, plot_rewards, reward_table, rollout_metrics
from cascade_envs.trajectory import Trajectory, TurnRecord


def episode(env_id: str, reward: Reward, n_tokens: int, finish: str = "stop") -> EpisodeResult:
    completion = Completion("x", finish_reason=finish, token_ids=list(range(n_tokens)), prompt_token_ids=[1])
    trajectory = Trajectory([TurnRecord([1], list(range(n_tokens)), None, finish)])
    return EpisodeResult(
        env_id, "t", 0, 0, [], [completion], reward, turns=1, terminated=True, trajectory=trajectory
    )


def test_rollout_metrics_by_hand():
    a = GroupResult(
        "env/A-v0",
        "t",
        {},
        [episode("env/A-v0", Reward(1.0), 4), episode("env/A-v0", Reward(0.0), 8, "length")],
    )
    b = GroupResult(
        "env/B-v0",
        "t",
        {},
        [episode("env/B-v0", Reward(0.5), 2), episode("env/B-v0", Reward.failed("judge down"), 6)],
    )
    batch = RolloutBatch(
        played=[a, b],
        groups=[a],
        groups_filtered=1,
        rounds=1,
        generation_s=2.0,
        rollout_s=2.5,
        generated_tokens=20,
    )
    m = rollout_metrics(batch)
    assert m["reward/env/A-v0"] == 0.5
    assert m["reward/env/B-v0"] == 0.5  # the masked sample is not a 0
    assert m["reward/mean"] == 0.5
    assert m["rollout/truncation_rate"] == 0.25
    assert m["rollout/response_length"] == 5.0 and m["rollout/response_length_max"] == 8.0
    assert m["batch/filtered_fraction"] == 0.5 and m["batch/groups_filtered"] == 1.0
    assert m["time/scoring_s"] == 0.5 and m["throughput/generation_tokens_per_s"] == 10.0


def test_logger_table_and_plot(tmp_path):
    logger = MetricsLogger(tmp_path, tensorboard=False)
    for step, (ra, rb) in enumerate([(0.0, 0.2), (0.5, 0.2), (1.0, 0.4)], start=1):
        logger.log(
            step,
            {
                "reward/env/A-v0": ra,
                "reward/env/B-v0": rb,
                "reward/mean": (ra + rb) / 2,
                "skipped": step == 1,
                "train/entropy": float("nan"),
            },
        )
    history = logger.history()
    assert history[0]["train/entropy"] is None  # NaN is written as null, the line stays valid JSON
    table = reward_table(history, window=1)
    assert "env/A-v0" in table and "+1.000" in table and "+0.200" in table
    logger.truncate_after(2)
    assert [h["step"] for h in logger.history()] == [1, 2]
    png = plot_rewards(logger.history(), tmp_path / "r.png")
    assert png is not None and png.stat().st_size > 1000
