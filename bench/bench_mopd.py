"""MOPD step time vs. GRPO step time on the same batch, same model, in one run (CPU).

One rollout batch (``--prompts`` x ``--group`` samples of ``bench/Reward-v0``, generated once with
the HF engine) is trained on by two trainers built from the same checkpoint: GRPO (no KL) and MOPD
with that same checkpoint as the teacher of the env (SmolLM2-135M-Instruct, the embedded model, by
default; ``--model tiny`` for a small random Llama with its tokenizer). What is timed is the
optimisation part of a step, which is where the two differ: GRPO's forward/backward; MOPD's
teacher forward pass over the batch (the ``teacher`` log-prob source) plus the same forward/backward.
Generation and scoring are the same for both and are not timed. The two alternate ``--repeats``
times after one untimed warm-up each; the fastest of each side counts. Run it under
``flock /tmp/cpu.lock`` on a shared machine.

    python bench/bench_mopd.py [--model embedded|tiny] [--prompts 4] [--group 4] [--max-tokens 48] [--repeats 3]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_grpo_vs_trl import build_model, register_bench_env
from bench_learning_vs_trl import training_config


def optimise_time(trainer: Any, batch: Any) -> tuple[float, dict[str, Any]]:
    """Seconds of one optimisation step of ``trainer`` on ``batch`` (teacher scoring included)."""
    start = time.perf_counter()
    metrics = trainer._optimize(batch, trainer.step + 1)
    trainer.step += 1
    return time.perf_counter() - start, metrics


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=["embedded", "tiny"], default="embedded")
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--lr", type=float, default=1e-6)
    args = parser.parse_args()
    args.steps = args.repeats + 1

    import torch

    from cascade_envs.trainer.loop import Trainer

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        model_dir = build_model(args.model, root / "model")
        mix = register_bench_env()
        grpo = Trainer(training_config(args, str(model_dir), root / "grpo", mix))
        config = training_config(args, str(model_dir), root / "mopd", mix)
        config.algorithm = "mopd"
        config.mopd.teachers = {"bench/Reward-v0": str(model_dir)}
        mopd = Trainer(config)
        batch = grpo.builder.build()  # generated once: both train on these sequences
        tokens = sum(s.trained_tokens for s in batch.sequences)
        times: dict[str, list[float]] = {"grpo": [], "mopd": []}
        teacher_s: list[float] = []
        for i in range(args.repeats + 1):
            g, _ = optimise_time(grpo, batch)
            m, metrics = optimise_time(mopd, batch)
            if i:  # the first of each is a warm-up
                times["grpo"].append(g)
                times["mopd"].append(m)
                teacher_s.append(metrics["time/teacher_s"])
        grpo.close()
        mopd.close()
    best_g, best_m = min(times["grpo"]), min(times["mopd"])
    print(
        f"model {args.model}, batch {len(batch.sequences)} sequences ({args.prompts} prompts x {args.group}), "
        f"{tokens} trained tokens, threads {torch.get_num_threads()}, best of {args.repeats}"
    )
    print(f"{'':<28} {'GRPO':>8} {'MOPD':>8} {'MOPD/GRPO':>10}")
    print(f"{'optimisation step (s)':<28} {best_g:>8.3f} {best_m:>8.3f} {best_m / best_g:>10.2f}")
    print(f"{'  of which teacher scoring':<28} {'-':>8} {min(teacher_s):>8.3f}")
    print(
        f"{'trained tokens / s':<28} {tokens / best_g:>8.0f} {tokens / best_m:>8.0f} {best_g / best_m:>10.2f}"
    )
    print(
        "all runs (s): GRPO "
        + ", ".join(f"{t:.3f}" for t in times["grpo"])
        + "; MOPD "
        + ", ".join(f"{t:.3f}" for t in times["mopd"])
    )


if __name__ == "__main__":
    main()
