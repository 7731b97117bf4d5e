"""One run to its last step, as ``cascade-envs train`` and each pipeline stage do it: build the trainer,
train, print the summary (reward table, held-out line, plot, checkpoint)."""

from __future__ import annotations

import sys
from typing import Any

from .config import Config
from .loop import Trainer
from .metrics import heldout_line, plot_rewards, reward_table


def run_training(config: Config, source: str) -> tuple[Trainer, list[dict[str, Any]]]:
    """Train ``config`` to its last step, printing the run's summary; returns the trainer and its history."""
    print(f"cascade-envs train: {config.name} from {source}", file=sys.stderr)
    print(
        f"  model {config.model.path}, envs {', '.join(config.mix.envs)}, {config.train.steps} steps, "
        f"{config.rollout.prompts_per_step} prompts x {config.rollout.group_size} rollouts per step, "
        f"output {config.train.output_dir}",
        file=sys.stderr,
    )
    trainer = Trainer(config)
    if trainer.resumed_from is not None:
        print(f"resumed from step {trainer.step} ({trainer.resumed_from})", file=sys.stderr)
    try:
        history = trainer.train()
    finally:
        trainer.close()
    skipped = sum(1 for h in history if h.get("skipped"))
    print(reward_table(history))
    if skipped:
        print(
            f"{skipped} step(s) skipped: no group had a learning signal (all-equal rewards or masked samples; "
            "see metrics.jsonl)"
        )
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
