from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="session", autouse=True)
def _trainer_toys():
    from tests.trainer.toys import register_toys

    register_toys()


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    from tests.trainer.toys import save_tiny

    return save_tiny(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture
def make_config(tiny_model_dir, tmp_path):
    """A small GRPO config on the tiny model and the SayYes env; keyword sections override."""
    from cascade_envs.trainer.checks import config_from_dict

    def make(**sections: dict[str, Any]):
        data: dict[str, Any] = {
            "model": {"path": str(tiny_model_dir)},
            "mix": {"envs": {"test/SayYes-v0": 1.0}},
            "rollout": {"group_size": 8, "prompts_per_step": 4, "max_tokens": 6},
            "optim": {"lr": 3e-3, "micro_batch_size": 8},
            "train": {
                "steps": 3,
                "output_dir": str(tmp_path / "run"),
                "save_every": 100,
                "tensorboard": False,
                "progress": False,
                "plot": False,
            },
        }
        for name, values in sections.items():
            data[name] = {**data.get(name, {}), **values}
        return config_from_dict(data)

    return make
