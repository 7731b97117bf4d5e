"""``cascade-envs train CONFIG.yaml [--set k=v]``: the run's outputs and its errors."""

from __future__ import annotations

import json

import pytest
import yaml

from cascade_envs.cli import main
from cascade_envs.trainer.cli import train_main


@pytest.fixture
def config_file(tiny_model_dir, tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump({
        "name": "tiny",
        "model": {"path": str(tiny_model_dir)},
        "mix": {"envs": {"test/SayYes-v0": 0.5, "test/HalfBroken-v0": 0.5}},
        "rollout": {"group_size": 4, "prompts_per_step": 4, "max_tokens": 6},
        "optim": {"lr": 3e-3},
        "train": {"steps": 2, "output_dir": str(tmp_path / "out"), "save_every": 1, "progress": False},
    }))
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
