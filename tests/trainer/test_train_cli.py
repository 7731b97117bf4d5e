"""``cascade-envs train CONFIG.yaml [--set k=v]``: the run's outputs and its errors."""

from __future__ import annotations

import json
import shutil
import time

import pytest
import yaml

from cascade_envs.cli import main
from cascade_envs.trainer.cli import train_main


@pytest.fixture
def config_file(tiny_model_dir, tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "name": "tiny",
                "model": {"path": str(tiny_model_dir)},
                "mix": {"envs": {"test/SayYes-v0": 0.5, "test/HalfBroken-v0": 0.5}},
                "rollout": {"group_size": 4, "prompts_per_step": 4, "max_tokens": 6},
                "optim": {"lr": 3e-3},
                "train": {
                    "steps": 2,
                    "output_dir": str(tmp_path / "out"),
                    "save_every": 1,
                    "progress": False,
                },
            }
        )
    )
    return path


def test_train_main_writes_metrics_plot_tensorboard_and_checkpoint(config_file, tmp_path, capsys):
    assert train_main(str(config_file), ["train.steps=3"]) == 0
    out = capsys.readouterr().out
    assert "first" in out and "last" in out and "test/SayYes-v0" in out
    run = tmp_path / "out"
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]
    png = run / "rewards.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert any((run / "tensorboard").iterdir())
    assert (run / "checkpoints" / "step_000003" / "config.json").is_file()


def test_cli_wiring_and_errors(config_file, capsys):
    assert main(["train", str(config_file), "--set", "train.steps=1", "--set", "train.plot=false"]) == 0
    assert main(["train", str(config_file), "--set", "mix.envs={test/SayYess-v0: 1}"]) != 0
    assert "did you mean 'test/SayYes-v0'" in capsys.readouterr().err
    assert main(["train", str(config_file), "--set", "model.path=/no/such/model"]) != 0
    assert "does not exist" in capsys.readouterr().err
    assert main(["train", str(config_file), "--set", "optim.lr_=1"]) != 0
    assert "did you mean 'lr'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("optim.lr=.inf", "optim.lr"),
        ("optim.lr=1e999", "optim.lr"),
        ("rollout.temperature=-1", "rollout.temperature"),
        ("rollout.top_p=0", "rollout.top_p"),
        ("optim.betas=[0.9, 1]", "optim.betas[1]"),
        ("optim.kl_coef=.nan", "optim.kl_coef"),
    ],
)
def test_settings_that_ruin_a_run_fail_at_once(config_file, tmp_path, capsys, override, key):
    start = time.monotonic()
    assert main(["train", str(config_file), "--set", override]) == 2
    assert time.monotonic() - start < 10
    assert f"cascade-envs: error: {key} must be" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()  # no step, no checkpoint


def test_unwritable_output_dir_fails_before_the_first_step(config_file, tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert main(["train", str(config_file), "--set", f"train.output_dir={blocker / 'out'}"]) == 2
    assert "train.output_dir" in capsys.readouterr().err


def test_resume_says_so_skips_unreadable_and_stray_checkpoints(config_file, tmp_path, capsys, caplog):
    assert main(["train", str(config_file), "--set", "train.keep_checkpoints=5"]) == 0
    root = tmp_path / "out" / "checkpoints"
    assert sorted(p.name for p in root.iterdir()) == ["step_000001", "step_000002"]
    capsys.readouterr()
    assert (
        main(["train", str(config_file), "--set", "train.steps=3", "--set", "train.keep_checkpoints=5"]) == 0
    )
    assert f"resumed from step 2 ({root / 'step_000002'})" in capsys.readouterr().err

    (root / "step_000003" / "trainer_state.pt").write_bytes(b"PK\x03\x04 truncated")
    shutil.copytree(root / "step_000001", root / "step_latest")
    assert (
        main(["train", str(config_file), "--set", "train.steps=4", "--set", "train.keep_checkpoints=5"]) == 0
    )
    err = capsys.readouterr().err
    assert f"checkpoint {root / 'step_000003'} is unreadable" in caplog.text  # a warning (stderr in a shell)
    assert f"resumed from step 2 ({root / 'step_000002'})" in err
    rows = [json.loads(line) for line in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    assert (root / "step_000004").is_dir() and (root / "step_latest").is_dir()
