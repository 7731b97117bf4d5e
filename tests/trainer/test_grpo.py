"""The GRPO loop: it learns, resumes bit-for-bit, and handles bad input without losing work."""

from __future__ import annotations

import json
import logging
import os
import re
import shutil

import numpy as np
import pytest
import torch

from cascade_envs.core import CascadeError
from cascade_envs.registry import UnknownIdError
from cascade_envs.trainer import checkpoint as ckpt
from cascade_envs.trainer.config import ConfigError
from cascade_envs.trainer.loop import Trainer, TrainingError, warmup_lr


def mean(values):
    return sum(values) / len(values)


@pytest.mark.slow
def test_mean_reward_rises_clearly(make_config):
    """A seeded run on the tiny model: the fraction of "yes" words climbs over 30 steps."""
    config = make_config(train={"steps": 30})
    history = Trainer(config).train()
    rewards = [h["reward/mean"] for h in history]
    assert len(rewards) == 30
    first, last = mean(rewards[:5]), mean(rewards[-5:])
    assert first < 0.1
    assert last > first + 0.2, rewards
    trained = [h for h in history if not h.get("skipped")]
    assert all(h["train/grad_norm"] > 0 and h["train/tokens"] > 0 for h in trained)
    # the engine samples with the training weights: train/inference logprobs agree
    assert all(h["train/inference_logprob_abs_diff"] < 1e-4 for h in trained)


def test_step_metrics_are_logged(make_config):
    trainer = Trainer(make_config(train={"steps": 2, "save_every": 1}))
    trainer.train()
    rows = [json.loads(line) for line in trainer.logger.path.read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    for key in (
        "reward/mean",
        "reward/test/SayYes-v0",
        "batch/filtered_fraction",
        "rollout/truncation_rate",
        "rollout/response_length",
        "train/entropy",
        "train/grad_norm",
        "train/loss",
        "time/generation_s",
        "time/scoring_s",
        "time/training_s",
        "time/sync_s",
        "throughput/generation_tokens_per_s",
        "throughput/train_tokens_per_s",
    ):
        assert key in rows[0], key
    assert [p.name for p in ckpt.list_checkpoints(trainer.output_dir)] == ["step_000001", "step_000002"][-2:]


def test_resumed_run_continues_bit_for_bit(make_config, tmp_path):
    straight = Trainer(make_config(train={"steps": 4, "save_every": 2, "output_dir": str(tmp_path / "a")}))
    full = straight.train()

    Trainer(make_config(train={"steps": 2, "save_every": 2, "output_dir": str(tmp_path / "b")})).train()
    resumed = Trainer(make_config(train={"steps": 4, "save_every": 2, "output_dir": str(tmp_path / "b")}))
    assert resumed.step == 2
    history = resumed.train()

    drop = ("time/", "throughput/")
    strip = [{k: v for k, v in h.items() if not k.startswith(drop)} for h in history]
    assert strip == [{k: v for k, v in h.items() if not k.startswith(drop)} for h in full]
    for a, b in zip(straight.model.state_dict().values(), resumed.model.state_dict().values(), strict=True):
        assert torch.equal(a, b)


def test_every_group_filtered_skips_the_step(make_config, caplog):
    config = make_config(
        mix={"envs": {"test/Constant-v0": 1.0}}, rollout={"max_rounds": 2}, train={"steps": 2}
    )
    trainer = Trainer(config)
    before = [p.clone() for p in trainer.model.parameters()]
    with caplog.at_level(logging.WARNING, logger="cascade_envs.trainer"):
        history = trainer.train()
    assert [h["skipped"] for h in history] == [True, True]
    assert "no group with a learning signal after 2 rollout round(s)" in history[0]["message"]
    assert "skipped" in caplog.text
    assert history[0]["batch/filtered_fraction"] == 1.0
    assert all(torch.equal(a, b) for a, b in zip(before, trainer.model.parameters(), strict=True))


def test_nan_loss_stops_and_keeps_the_last_good_checkpoint(make_config, monkeypatch):
    trainer = Trainer(make_config(train={"steps": 4, "save_every": 1}))
    trainer.train_step()
    good = trainer.save()
    weights = [p.clone() for p in trainer.model.parameters()]
    real = trainer.strategy.loss

    def nan_loss(inputs):
        loss, metrics = real(inputs)
        return loss * float("nan"), metrics

    monkeypatch.setattr(trainer.strategy, "loss", nan_loss)
    with pytest.raises(
        TrainingError, match=r"step 2: the loss is nan.*last good checkpoint is .*step_000001"
    ):
        for _ in range(5):  # a step may be skipped (no signal) before one reaches the loss
            trainer.train_step()
    assert all(torch.equal(a, b) for a, b in zip(weights, trainer.model.parameters(), strict=True))
    assert ckpt.latest_checkpoint(trainer.output_dir) == good


def test_unknown_env_is_a_clear_error(make_config):
    with pytest.raises(UnknownIdError, match="did you mean 'test/SayYes-v0'"):
        Trainer(make_config(mix={"envs": {"test/SayYess-v0": 1.0}}))


def test_weights_not_summing_to_one_are_normalised(make_config, caplog):
    config = make_config(mix={"envs": {"test/SayYes-v0": 3.0, "test/HalfBroken-v0": 1.0}})
    with caplog.at_level(logging.WARNING, logger="cascade_envs.mix"):
        trainer = Trainer(config)
    assert "normalising" in caplog.text
    assert trainer.mix.weights == {"test/SayYes-v0": 0.75, "test/HalfBroken-v0": 0.25}


def test_negative_weight_is_an_error(make_config):
    with pytest.raises(CascadeError, match="negative"):
        Trainer(make_config(mix={"envs": {"test/SayYes-v0": 1.0, "test/Constant-v0": -0.5}}))


def test_missing_model_path_is_a_clear_error(make_config, tmp_path):
    with pytest.raises(CascadeError, match="does not exist"):
        Trainer(make_config(model={"path": str(tmp_path / "no-such-model")}))
    (tmp_path / "empty").mkdir()
    with pytest.raises(CascadeError, match="not a Hugging Face model folder"):
        Trainer(make_config(model={"path": str(tmp_path / "empty")}))


def test_kl_reference_and_micro_batching_match_one_big_batch(make_config, tmp_path):
    """Gradient accumulation over micro-batches gives the same update as one batch (and KL runs)."""
    a = Trainer(
        make_config(optim={"micro_batch_size": 32, "kl_coef": 0.1}, train={"output_dir": str(tmp_path / "a")})
    )
    ma = a.train_step()
    b = Trainer(
        make_config(optim={"micro_batch_size": 3, "kl_coef": 0.1}, train={"output_dir": str(tmp_path / "b")})
    )
    mb = b.train_step()
    assert ma["batch/sequences"] > 3  # more than one micro-batch in b
    assert ma["reward/mean"] == mb["reward/mean"]
    assert ma["train/loss"] == pytest.approx(mb["train/loss"], abs=1e-6)
    # Adam's first update is about lr * sign(grad) whatever the gradient's size, so the weights
    # alone would hide a wrongly scaled micro-batch: the gradient norm checks the scale, and the
    # weights the direction. Elements whose gradient is float noise (~Adam's eps) may move by a
    # few 1e-6 either way at lr 3e-3, so the weights are compared at 1e-5.
    assert ma["train/grad_norm"] == pytest.approx(mb["train/grad_norm"], rel=1e-5)
    for pa, pb in zip(a.model.parameters(), b.model.parameters(), strict=True):
        assert torch.allclose(pa, pb, atol=1e-5)


def test_gradient_checkpointing_gives_the_same_update(make_config, tmp_path):
    plain = Trainer(make_config(train={"output_dir": str(tmp_path / "a")}))
    plain.train_step()
    ckpt_on = Trainer(
        make_config(model={"gradient_checkpointing": True}, train={"output_dir": str(tmp_path / "b")})
    )
    assert (
        getattr(ckpt_on.model, "is_activation_checkpointing", None) or ckpt_on.model.is_gradient_checkpointing
    )
    ckpt_on.train_step()
    for pa, pb in zip(plain.model.parameters(), ckpt_on.model.parameters(), strict=True):
        assert torch.allclose(pa, pb, atol=1e-6)


@pytest.mark.parametrize("model", [{"mixed_precision": "bfloat16"}, {"dtype": "bfloat16"}])
def test_bf16_training_step(make_config, model):
    trainer = Trainer(make_config(model=model))
    expected = torch.bfloat16 if model.get("dtype") == "bfloat16" else torch.float32
    assert next(trainer.model.parameters()).dtype == expected
    before = [p.detach().float().clone() for p in trainer.model.parameters()]
    metrics = {"skipped": True}
    while metrics.get("skipped"):
        metrics = trainer.train_step()
    assert torch.isfinite(torch.tensor(metrics["train/loss"])) and metrics["train/grad_norm"] > 0
    assert any(not torch.equal(a, b.float()) for a, b in zip(before, trainer.model.parameters(), strict=True))


def test_linear_lr_warmup(make_config):
    optim = make_config(optim={"lr": 2e-6, "warmup_steps": 3, "warmup_start_lr": 2e-7}).optim
    assert [warmup_lr(optim, s) for s in (1, 2, 3, 4, 50)] == pytest.approx([2e-7, 1.1e-6, 2e-6, 2e-6, 2e-6])


# ----- hardening: settings checked before work, safe and resilient resume -------------------------


def _train_to(make_config, out, steps, **train):
    Trainer(
        make_config(
            train={"steps": steps, "save_every": 1, "keep_checkpoints": 5, "output_dir": str(out), **train}
        )
    ).train()


@pytest.mark.parametrize(
    ("section", "key", "value"),
    [
        ("optim", "lr", float("inf")),
        ("rollout", "temperature", -1.0),
        ("rollout", "top_p", 0.0),
        ("optim", "betas", [0.9, float("nan")]),
        ("train", "output_dir", ""),
    ],
)
def test_trainer_checks_a_config_changed_in_code_before_any_work(make_config, tmp_path, section, key, value):
    config = make_config(train={"output_dir": str(tmp_path / "run")})
    setattr(getattr(config, section), key, value)
    with pytest.raises(ConfigError, match=re.escape(f"{section}.{key}")):
        Trainer(config)
    assert not (tmp_path / "run").exists()


def test_non_finite_weights_are_never_checkpointed(make_config):
    trainer = Trainer(make_config(train={"steps": 1}))
    with torch.no_grad():
        next(trainer.model.parameters()).fill_(float("inf"))
    with pytest.raises(TrainingError, match="not finite, so no checkpoint was written"):
        trainer.save()
    assert ckpt.list_checkpoints(trainer.output_dir) == []


def test_unreadable_checkpoint_falls_back_to_the_previous_one(make_config, tmp_path, caplog):
    out = tmp_path / "run"
    _train_to(make_config, out, 3)
    root = ckpt.checkpoint_dir(out)
    state = root / "step_000003" / ckpt.STATE_FILE
    state.write_bytes(state.read_bytes()[: state.stat().st_size // 2])  # a crash mid-copy, a full disk
    weights = root / "step_000002" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-100])
    shutil.copytree(root / "step_000001", root / "step_latest")  # a stray folder: not a checkpoint
    (root / "notes").mkdir()
    with caplog.at_level(logging.INFO, logger="cascade_envs.trainer"):
        trainer = Trainer(make_config(train={"steps": 4, "output_dir": str(out)}))
    assert trainer.step == 1 and trainer.resumed_from == root / "step_000001"
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(str(root / "step_000003") in w and "unreadable" in w for w in warnings), warnings
    assert any(str(root / "step_000002") in w and "truncated" in w for w in warnings), warnings
    assert f"resumed from step 1 ({root / 'step_000001'})" in caplog.text
    assert [r["step"] for r in trainer.train()] == [1, 2, 3, 4]


def test_no_readable_checkpoint_is_an_error_naming_them(make_config, tmp_path):
    out = tmp_path / "run"
    _train_to(make_config, out, 1)
    (ckpt.checkpoint_dir(out) / "step_000001" / ckpt.STATE_FILE).write_bytes(b"")
    with pytest.raises(ckpt.CheckpointError, match=r"step_000001.*train\.resume=false"):
        Trainer(make_config(train={"steps": 2, "output_dir": str(out)}))


class _RunsCode:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.makedirs, (self.marker,))


def test_a_checkpoint_cannot_run_code(make_config, tmp_path, caplog):
    out, marker = tmp_path / "run", tmp_path / "code-ran"
    _train_to(make_config, out, 2)
    state_file = ckpt.checkpoint_dir(out) / "step_000002" / ckpt.STATE_FILE
    state = torch.load(state_file, weights_only=True)
    torch.save({**state, "extra": _RunsCode(str(marker))}, state_file)
    with caplog.at_level(logging.WARNING, logger="cascade_envs.trainer"):
        trainer = Trainer(make_config(train={"steps": 3, "output_dir": str(out)}))
    assert not marker.exists()
    assert trainer.step == 1 and "step_000002 is unreadable" in caplog.text


def test_checkpoints_of_earlier_versions_still_resume(make_config, tmp_path):
    """Their NumPy RNG state is a pickled array: allowed, as plain data, by ``weights_only``."""
    out = tmp_path / "run"
    _train_to(make_config, out, 1)
    state_file = ckpt.checkpoint_dir(out) / "step_000001" / ckpt.STATE_FILE
    state = torch.load(state_file, weights_only=True)
    np.random.set_state(state["rng"]["numpy"])
    torch.save({**state, "rng": {**state["rng"], "numpy": np.random.get_state()}}, state_file)
    assert Trainer(make_config(train={"steps": 2, "output_dir": str(out)})).step == 1
