"""A plugin's loss strategy: registered through the ``cascade_envs_register_loss_strategies`` hook of a
distribution found by its entry point, named by ``algorithm:`` in a YAML config, trained by the loop."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from tests.plugins.test_example_plugin import write_dist

REPO = Path(__file__).resolve().parents[2]

HOOKS = textwrap.dedent("""
    from cascade_envs.plugins import hookimpl

    @hookimpl
    def cascade_envs_register_loss_strategies(register):
        register("tiny/pg", entry_point="tiny_loss_impl:PolicyGradient")
""")

STRATEGY = textwrap.dedent("""
    from cascade_envs.trainer.strategies import LossStrategy

    class PolicyGradient(LossStrategy):
        '''Plain policy gradient on GRPO's advantages; counts the tokens it trained.'''

        advantage = "grpo"

        def loss(self, inputs):
            loss = -(inputs.advantages.unsqueeze(-1) * inputs.logp * inputs.mask).sum() / inputs.num_tokens
            return loss, {"tiny/tokens": float(inputs.mask.sum())}
""")

PROGRAM = textwrap.dedent("""
    import json, sys
    from cascade_envs.registry import loss_strategies
    from cascade_envs.trainer.checks import load_config
    from cascade_envs.trainer.loop import Trainer
    from tests.trainer.toys import register_toys

    register_toys()
    spec = loss_strategies.get("tiny/pg")  # plugin discovery
    lazy = "tiny_loss_impl" not in sys.modules
    config = load_config(sys.argv[1])
    trainer = Trainer(config)
    metrics = trainer.train_step()
    trainer.close()
    print(json.dumps({"strategy": type(trainer.strategy).__name__, "lazy": lazy,
                      "spec": [spec.plugin, spec.distribution, spec.version], "tokens": metrics["tiny/tokens"],
                      "trained": metrics["train/tokens"]}))
""")


@pytest.fixture(scope="module")
def plugin_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("loss-plugin")
    write_dist(root, "cascade-envs-tiny-loss", "0.3", "tiny-loss", "tiny_loss_hooks", HOOKS)
    (root / "tiny_loss_impl.py").write_text(STRATEGY)
    return root


def test_a_plugins_loss_is_named_by_algorithm_and_trained(plugin_path, tiny_model_dir, tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "algorithm": "tiny/pg",
                "model": {"path": str(tiny_model_dir)},
                "mix": {"envs": {"test/SayYes-v0": 1.0}},
                "rollout": {
                    "group_size": 4,
                    "prompts_per_step": 2,
                    "max_tokens": 4,
                    "dynamic_filtering": False,
                },
                "train": {
                    "steps": 1,
                    "output_dir": str(tmp_path / "run"),
                    "tensorboard": False,
                    "progress": False,
                    "plot": False,
                },
            }
        )
    )
    env = {k: v for k, v in os.environ.items() if k != "CASCADE_ENVS_DISABLE_PLUGIN_AUTOLOAD"}
    env["PYTHONPATH"] = os.pathsep.join([str(plugin_path), str(REPO)])
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM, str(config)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["strategy"] == "PolicyGradient"
    assert result["lazy"]  # the strategy's module is imported when a config names it, not at discovery
    assert result["spec"] == ["tiny-loss", "cascade-envs-tiny-loss", "0.3"]
    assert result["tokens"] == result["trained"] > 0  # the loop ran the plugin's loss on every trained token


def test_without_the_plugin_the_name_is_unknown(tmp_path):
    from cascade_envs.trainer.checks import config_from_dict
    from cascade_envs.trainer.config import ConfigError

    with pytest.raises(ConfigError, match=r"algorithm: unknown loss strategy 'tiny/pg'"):
        config_from_dict({"algorithm": "tiny/pg", "mix": {"envs": {"test/SayYes-v0": 1.0}}})
