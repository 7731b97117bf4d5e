"""Data-parallel scaling on this machine: one process vs ``--nproc`` sharded ranks, in one run.

Both sides run ``cascade-envs train`` (the same config, seed and prompts; dynamic filtering off so
every step trains on exactly ``--prompts`` groups): one plain process with all the CPU threads, then
``--nproc`` ranks (torchrun, gloo, FSDP2), the threads split between them. Reported per side: time
per step (mean of the steps after the first, a warm-up), generated and trained tokens per second,
and each process's peak RSS (the largest rank's). The scaling efficiency is
``t(1) / (N * t(N))``; on a CPU the ranks share the same cores (2 ranks on 2 cores split them), so
it measures overhead, not added compute. Also printed: the training state per rank (weights,
gradients, AdamW moments, float32) with and without sharding, plus the full rollout copy each rank
keeps, and the tokens one step's optimizer pass would run padded against those it runs packed
(``train/padded_tokens`` and ``train/packed_tokens`` of the one-process run, per step).

    python bench/bench_scale.py [--model embedded] [--steps 3] [--prompts 4] [--group 4] [--max-tokens 32] [--nproc 2]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

PEAK = (
    "import resource, subprocess, sys; code = subprocess.run(sys.argv[1:]).returncode; "
    "print('PEAK_KIB', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr); sys.exit(code)"
)


def overrides(args: argparse.Namespace, out: Path) -> list[str]:
    pairs = {
        "model.path": args.model,
        "rollout.group_size": args.group,
        "rollout.prompts_per_step": args.prompts,
        "rollout.max_tokens": args.max_tokens,
        "rollout.dynamic_filtering": "false",
        "rollout.max_rounds": 1,
        "optim.micro_batch_size": args.micro_batch,
        "train.steps": args.steps,
        "train.save_every": 1000,
        "train.resume": "false",
        "train.output_dir": str(out),
        "train.tensorboard": "false",
        "train.progress": "false",
        "train.plot": "false",
        "heldout.env": "null",
    }
    return [f"--set={k}={v}" for k, v in pairs.items()]


def run(args: argparse.Namespace, nproc: int, out: Path) -> dict[str, Any]:
    """One ``cascade-envs train`` run under a wrapper that reports its largest process's peak RSS."""
    command = [sys.executable, "-m", "cascade_envs.cli", "train", *overrides(args, out), f"--nproc={nproc}"]
    threads = max(1, (os.cpu_count() or 1) // nproc)
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "HF_HUB_OFFLINE": "1"}
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", PEAK, *command], env=env, capture_output=True, text=True, timeout=3600
    )
    wall = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"the {nproc}-rank run failed:\n{done.stderr[-3000:]}")
    peak = next(int(line.split()[1]) for line in done.stderr.splitlines() if line.startswith("PEAK_KIB"))
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    timed = rows[1:] or rows
    step_s = sum(r["time/step_s"] for r in timed) / len(timed)
    return {
        "nproc": nproc,
        "threads": threads,
        "step_s": step_s,
        "gen_tok_s": sum(r["throughput/generated_tokens"] for r in timed)
        / sum(r["time/generation_s"] for r in timed),
        "train_tok_s": sum(r["train/tokens"] for r in timed) / sum(r["time/training_s"] for r in timed),
        "step_tok_s": sum(r["throughput/generated_tokens"] for r in timed)
        / sum(r["time/step_s"] for r in timed),
        "peak_mib": peak / 1024,
        "wall_s": wall,
        "rewards": [round(r.get("reward/mean", float("nan")), 3) for r in rows],
        "padded": sum(r["train/padded_tokens"] for r in rows) / len(rows),
        "packed": sum(r["train/packed_tokens"] for r in rows) / len(rows),
    }


def parameters(args: argparse.Namespace, out: Path) -> int:
    """The trained model's parameter count."""
    from cascade_envs.trainer.checks import load_config
    from cascade_envs.trainer.model import load_model

    flags = [o.removeprefix("--set=") for o in overrides(args, out)]
    model, _ = load_model(load_config(None, flags).model)
    return sum(p.numel() for p in model.parameters())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="embedded")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--micro-batch", type=int, default=8)
    parser.add_argument("--nproc", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        one = run(args, 1, Path(tmp) / "one")
        many = run(args, args.nproc, Path(tmp) / "many")
        params = parameters(args, Path(tmp) / "params")
    n = args.nproc
    print(
        f"model {args.model}, {args.prompts} prompts x {args.group} rollouts, {args.max_tokens} tokens, {args.steps} steps "
        f"(first not timed), {os.cpu_count()} CPU(s)"
    )
    print(
        f"{'ranks':>5} {'threads':>7} {'step s':>8} {'gen tok/s':>10} {'train tok/s':>11} {'step tok/s':>10} {'peak RSS/rank MiB':>17}  rewards"
    )
    for r in (one, many):
        print(
            f"{r['nproc']:>5} {r['threads']:>7} {r['step_s']:>8.2f} {r['gen_tok_s']:>10.1f} {r['train_tok_s']:>11.1f} "
            f"{r['step_tok_s']:>10.1f} {r['peak_mib']:>17.0f}  {r['rewards']}"
        )
    print(
        f"scaling efficiency t(1) / ({n} x t({n})): {one['step_s'] / (n * many['step_s']):.2f}; speed-up t(1)/t({n}): "
        f"{one['step_s'] / many['step_s']:.2f} (the ranks share the same {os.cpu_count()} cores)"
    )
    state = 16 * params / 2**20  # float32 weights + gradients + two AdamW moments
    print(
        f"training state per rank ({params / 1e6:.1f}M parameters, float32 weights+grads+AdamW): 1 process "
        f"{state:.0f} MiB, sharded over {n}: {state / n:.0f} MiB (+ {4 * params / 2**20:.0f} MiB full rollout copy per rank)"
    )
    print(
        f"tokens per step in the optimizer pass (one process): padded {one['padded']:.0f}, packed "
        f"{one['packed']:.0f} ({one['padded'] / max(one['packed'], 1):.2f}x)"
    )


if __name__ == "__main__":
    main()
