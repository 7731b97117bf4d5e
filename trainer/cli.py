"""``cascade-envs train [CONFIG] [--set key.sub=value ...] [--from-stage NAME]``: one run or a pipeline.

``CONFIG`` is a YAML file or the name of a shipped config (``trainer/configs/NAME.yaml``, e.g.
``if_rl`` or ``cascade_smoke``); none: the embedded default run. A file with a top-level
``stages:`` list is a Cascade RL pipeline (``cascade.py``); any other is a single-stage config.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

from .._extras import require
from .config import Config, ConfigError, load_config


def _setup() -> None:
    require("torch", "training")
    require("transformers", "training")
    from transformers.utils import logging as hf_logging

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    hf_logging.disable_progress_bar()  # weight loading/saving bars would break up the step bar


def train_main(config_path: str | None, overrides: list[str], from_stage: str | None = None) -> int:
    """Train with ``config_path`` (``None``: the embedded default run); returns the exit code.

    Errors the user can fix are raised as ``CascadeError`` (the CLI prints them on one line); every
    setting is checked (``ConfigError`` naming the key) before the model is loaded.
    """
    from .cascade import find_config
    from .cascade_run import is_pipeline_file, run_pipeline

    path = find_config(config_path) if config_path is not None else None
    pipeline = path is not None and is_pipeline_file(path)
    if from_stage is not None and not pipeline:
        raise ConfigError("--from-stage applies to a pipeline file (one with a top-level 'stages:' list)")
    _setup()
    if pipeline:
        assert path is not None
        print(f"cascade-envs train: pipeline {path}", file=sys.stderr)
        run_pipeline(path, overrides, from_stage)
        return 0
    config = load_config(path, overrides)
    run_training(config, str(path) if path else "the embedded default config")
    return 0


def run_training(config: Config, source: str) -> tuple[Any, list[dict[str, Any]]]:
    """Train ``config`` to its last step, printing the run's summary; returns the trainer and its history."""
    from .grpo import GRPOTrainer
    from .metrics import heldout_line, plot_rewards, reward_table

    print(f"cascade-envs train: {config.name} from {source}", file=sys.stderr)
    print(f"  model {config.model.path}, envs {', '.join(config.mix.envs)}, {config.train.steps} steps, "
          f"{config.rollout.prompts_per_step} prompts x {config.rollout.group_size} rollouts per step, "
          f"output {config.train.output_dir}", file=sys.stderr)
    trainer = GRPOTrainer(config)
    if trainer.resumed_from is not None:
        print(f"resumed from step {trainer.step} ({trainer.resumed_from})", file=sys.stderr)
    try:
        history = trainer.train()
    finally:
        trainer.close()
    skipped = sum(1 for h in history if h.get("skipped"))
    print(reward_table(history))
    if skipped:
        print(f"{skipped} step(s) skipped: no group had a learning signal (all-equal rewards or masked samples; "
              "see metrics.jsonl)")
    line = heldout_line(trainer.heldout)
    if line:
        print(line)
    if config.train.plot:
        png = plot_rewards(history, trainer.output_dir / "rewards.png", config.algorithm)
        if png:
            print(f"reward curve: {png}")
    print(f"metrics: {trainer.logger.path}")
    if trainer.last_checkpoint:
        print(f"checkpoint: {trainer.last_checkpoint}")
    return trainer, history
