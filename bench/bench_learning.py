"""Plumbing check: does a GRPO step push the reward the right way? Not a learning benchmark.

A seeded run prints its reward curve, initial policy vs. trained policy. Default: the tiny
randomly initialised model of the trainer tests on the SayYes env (reward: the fraction of the
answer's words that are "yes"), 60 steps at a large learning rate, about a minute on 2 CPU cores.
A rise shows that the gradient has the right sign end to end (rollouts, advantages, loss,
optimizer), nothing more: the toy learns to say "yes" whatever the prompt. For learning on a real
env with the real model, against TRL, see ``bench_learning_vs_trl.py``. With
``--model PATH --env ID`` it runs any local model on any registered env (e.g. the embedded
SmolLM2-135M-Instruct on ``cascade/MCQA-v0`` on a GPU machine). The reference is the starting
policy: the mean reward of the first steps, against the mean of the last steps.

    python bench/bench_learning.py [--steps 60] [--lr 3e-3] [--model tiny|embedded|PATH] [--env ID]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--model", default="tiny", help="tiny (the test model), embedded, or a model folder")
    parser.add_argument("--env", default="test/SayYes-v0")
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=6)
    parser.add_argument("--window", type=int, default=5, help="steps averaged at each end of the curve")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    from cascade_envs.trainer.checks import config_from_dict
    from cascade_envs.trainer.loop import Trainer
    from tests.trainer.toys import register_toys, save_tiny

    register_toys()
    with tempfile.TemporaryDirectory(prefix="bench-learning-") as tmp:
        model = str(save_tiny(Path(tmp) / "model", seed=args.seed)) if args.model == "tiny" else args.model
        config = config_from_dict(
            {
                "model": {"path": model},
                "mix": {"envs": {args.env: 1.0}},
                "rollout": {
                    "group_size": args.group,
                    "prompts_per_step": args.prompts,
                    "max_tokens": args.max_tokens,
                },
                "optim": {"lr": args.lr, "micro_batch_size": args.prompts * args.group},
                "train": {
                    "steps": args.steps,
                    "seed": args.seed,
                    "output_dir": str(Path(tmp) / "run"),
                    "save_every": 10**6,
                    "tensorboard": False,
                    "progress": False,
                    "plot": False,
                    "resume": False,
                },
            }
        )
        start = time.perf_counter()
        trainer = Trainer(config)
        rewards = []
        for step in range(1, args.steps + 1):
            metrics = trainer.train_step()
            reward = metrics["reward/mean"]
            rewards.append(reward)
            bar = "#" * round(40 * max(0.0, min(1.0, reward)))
            note = " (skipped: no signal)" if metrics.get("skipped") else ""
            print(f"step {step:>4}  reward {reward:6.3f}  {bar}{note}", flush=True)
        trainer.close()
        elapsed = time.perf_counter() - start
    w = min(args.window, len(rewards))
    first, last = sum(rewards[:w]) / w, sum(rewards[-w:]) / w
    print(
        f"\nmodel={args.model} env={args.env} steps={args.steps} lr={args.lr} seed={args.seed} "
        f"({elapsed:.1f} s, {elapsed / args.steps:.2f} s/step)"
    )
    print("plumbing check (gradient sign on a toy reward), not a learning claim")
    print(f"{'':<30}{'initial policy':>16}{'after GRPO':>12}{'ratio':>8}")
    ratio = f"{last / first:.1f}x" if first > 0 else "inf"
    print(f"{'mean reward (first/last ' + str(w) + ')':<30}{first:>16.3f}{last:>12.3f}{ratio:>8}")


if __name__ == "__main__":
    main()
