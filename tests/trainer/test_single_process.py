"""A single training process: settings only a sharded run can use are refused with one line, and a run
that starts over (``train.resume: false``) sets the earlier run's records aside instead of appending."""

from __future__ import annotations

import json

import pytest

from cascade_envs.trainer import checkpoint as ckpt
from cascade_envs.trainer.config import ConfigError
from cascade_envs.trainer.loop import Trainer


@pytest.mark.parametrize(
    ("train", "message"),
    [
        ({"cpu_offload": True}, r"train\.cpu_offload applies to sharded runs, and this is a single process"),
        ({"launcher": "ray"}, r"train\.launcher: ray applies to sharded runs"),
        ({"world_size": 2}, r"train\.world_size is 2: start its ranks with cascade-envs train --nproc 2"),
    ],
)
def test_sharded_settings_are_refused_in_a_single_process(make_config, train, message):
    with pytest.raises(ConfigError, match=message):
        Trainer(make_config(train=train))


def _lines(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_a_run_that_starts_over_sets_the_earlier_one_aside(make_config, tmp_path, caplog):
    out = tmp_path / "run"
    settings = {"save_every": 1, "keep_checkpoints": 5, "output_dir": str(out), "save_rollouts": True}
    Trainer(make_config(train={**settings, "steps": 3})).train()
    assert [r["step"] for r in _lines(out / "metrics.jsonl")] == [1, 2, 3]
    fresh = Trainer(make_config(train={**settings, "steps": 1, "resume": False}))
    assert fresh.step == 0 and fresh.resumed_from is None
    assert "the earlier run in" in caplog.text and "earlier_runs/run_1" in caplog.text
    fresh.train()
    assert [r["step"] for r in _lines(out / "metrics.jsonl")] == [1]
    earlier = out / ckpt.EARLIER_RUNS / "run_1"
    assert [r["step"] for r in _lines(earlier / "metrics.jsonl")] == [1, 2, 3]
    assert [p.name for p in ckpt.list_checkpoints(earlier.parent / "run_1")] == [
        "step_000001",
        "step_000002",
        "step_000003",
    ]
    assert [p.name for p in ckpt.list_checkpoints(out)] == ["step_000001"]  # no mix with the earlier run
    assert (earlier / "rollouts.jsonl").is_file() and len(_lines(out / "rollouts.jsonl")) < len(
        _lines(earlier / "rollouts.jsonl")
    )
    resumed = Trainer(make_config(train={**settings, "steps": 2}))  # resuming finds this run's checkpoint
    assert resumed.resumed_from == ckpt.checkpoint_dir(out) / "step_000001"
    Trainer(make_config(train={**settings, "steps": 1, "resume": False}))
    assert (out / ckpt.EARLIER_RUNS / "run_2" / "metrics.jsonl").is_file()
