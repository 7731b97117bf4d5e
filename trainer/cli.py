"""``cascade-envs train [CONFIG.yaml] [--set key.sub=value ...]``: run GRPO from a config."""

from __future__ import annotations

import logging
import sys

from .._extras import require
from .config import load_config


def train_main(config_path: str | None, overrides: list[str]) -> int:
    """Train with ``config_path`` (``None``: the embedded default run); returns the exit code.

    Errors the user can fix are raised as ``CascadeError`` (the CLI prints them on one line); every
    setting is checked (``ConfigError`` naming the key) before the model is loaded.
    """
    require("torch", "training")
    require("transformers", "training")
    from transformers.utils import logging as hf_logging

    from .grpo import GRPOTrainer
    from .metrics import heldout_line, plot_rewards, reward_table

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    hf_logging.disable_progress_bar()  # weight loading/saving bars would break up the step bar
    config = load_config(config_path, overrides)
    source = config_path or "the embedded default config"
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
        png = plot_rewards(history, trainer.output_dir / "rewards.png")
        if png:
            print(f"reward curve: {png}")
    print(f"metrics: {trainer.logger.path}")
    if trainer.last_checkpoint:
        print(f"checkpoint: {trainer.last_checkpoint}")
    return 0
