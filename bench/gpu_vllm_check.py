"""The multi-GPU vLLM check of ``.ci/gpu_vllm.sh``: short GRPO and MOPD jobs of the embedded model with the vLLM engine, at 1
and N ranks, and the 2-rank-vs-1 equivalence check, on NVIDIA GPUs. Prints one table.

    python bench/gpu_vllm_check.py --gpus N [--steps 2] [--out DIR] [--dry-run]

Jobs (``cascade-envs train`` in a subprocess each, so every job gets a fresh CUDA context):

- ``grpo-1`` / ``mopd-1``: one rank, the in-process vLLM engine (sleep mode while the optimizer
  steps), MOPD with a vLLM teacher (the embedded model scoring itself: a throughput check);
- ``grpo-ray-N``: N FSDP2 ranks (NCCL) under torchrun, rollouts on N vLLM engines in Ray actors
  colocated on the same GPUs (``rollout.engine: ray``, sleep mode, weights through the object store:
  NCCL cannot put two ranks on one GPU);
- ``grpo-sep`` (2+ GPUs): one trainer rank on GPU 0, N-1 vLLM engines on the other GPUs, weights
  broadcast over NCCL after every step.

Per job, from its ``metrics.jsonl`` (steps after the first, which pays compilation and warm-up):
generation and training tokens/s, time per step, weight-sync time and peak GPU memory of rank 0.
``--dry-run`` prints the commands and checks the configs (runs on CPU).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
ENV = "cascade/MCQA-v0"
VLLM = {"gpu_memory_utilization": 0.3, "max_model_len": 2048, "enable_sleep_mode": True}


def base(out: Path, steps: int) -> dict[str, Any]:
    return {
        "model": {"path": "embedded"},
        "mix": {"envs": {ENV: 1.0}},
        "rollout": {"group_size": 8, "prompts_per_step": 8, "max_tokens": 256, "temperature": 1.0},
        "optim": {"lr": 1e-6, "micro_batch_size": 8},
        "train": {
            "steps": steps,
            "output_dir": str(out),
            "save_every": 1000,
            "tensorboard": False,
            "progress": False,
            "plot": False,
        },
    }


@dataclass
class Job:
    name: str
    config: dict[str, Any]
    trainer_gpus: str
    """``CUDA_VISIBLE_DEVICES`` of the trainer."""
    ray_gpus: str | None = None
    """``CUDA_VISIBLE_DEVICES`` of the Ray cluster started for the job (``None``: no Ray)."""


def ray_engine(num_engines: int, colocate: bool) -> dict[str, Any]:
    engine = {k: v for k, v in VLLM.items() if k != "enable_sleep_mode"}
    kwargs = {"backend": "vllm", "num_engines": num_engines, "colocate": colocate, "address": "auto"}
    if colocate:
        kwargs["gpu_fraction"] = 0.6  # one engine per GPU
    return {"engine": "ray", "engine_kwargs": {**kwargs, "engine_kwargs": engine}}


def jobs(gpus: int, steps: int, out: Path) -> list[Job]:
    """The jobs this many GPUs can run (see the module docstring)."""
    every = ",".join(str(i) for i in range(gpus))
    grpo = base(out / "grpo-1", steps)
    grpo["rollout"] |= {"engine": "vllm", "engine_kwargs": VLLM}
    mopd = base(out / "mopd-1", steps)
    mopd["algorithm"] = "mopd"
    mopd["rollout"] |= {"engine": "vllm", "engine_kwargs": VLLM, "group_size": 1, "prompts_per_step": 64}
    mopd["mopd"] = {
        "default_teacher": "embedded",
        "teacher_engine": "vllm",
        "teacher_engine_kwargs": {"gpu_memory_utilization": 0.2, "max_model_len": 2048},
    }
    found = [Job("grpo-1", grpo, "0"), Job("mopd-1", mopd, "0")]
    colocated = base(out / f"grpo-ray-{gpus}", steps)
    colocated["rollout"] |= ray_engine(gpus, colocate=True)
    colocated["train"] |= {"world_size": gpus}
    found.append(Job(f"grpo-ray-{gpus}", colocated, every, every))
    if gpus >= 2:  # the trainer on GPU 0, engines on the others: NCCL weight broadcast
        separate = base(out / "grpo-sep", steps)
        separate["rollout"] |= ray_engine(gpus - 1, colocate=False)
        found.append(Job("grpo-sep", separate, "0", ",".join(str(i) for i in range(1, gpus))))
    return found


def ray_cluster(devices: str | None, start: bool) -> None:
    if devices is None:
        return
    ray = [str(Path(sys.executable).with_name("ray"))]
    if start:
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": devices}
        argv = [*ray, "start", "--head", f"--num-gpus={len(devices.split(','))}", "--disable-usage-stats"]
        subprocess.run(argv, env=env, check=True, timeout=120, stdout=subprocess.DEVNULL)
    else:
        subprocess.run([*ray, "stop", "--force"], check=False, timeout=120, stdout=subprocess.DEVNULL)


def command(config: Path, world_size: int) -> list[str]:
    cli = [sys.executable, "-m", "cascade_envs", "train", str(config)]
    return cli + (["--nproc", str(world_size)] if world_size > 1 else [])


def summary(metrics: Path) -> dict[str, float]:
    rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    rows = [r for r in rows if not r.get("skipped")][1:] or rows  # the first step warms up

    def mean(key: str) -> float:
        values = [r[key] for r in rows if isinstance(r.get(key), (int, float))]
        return statistics.fmean(values) if values else float("nan")

    return {
        "gen_tok_s": mean("throughput/generation_tokens_per_s"),
        "train_tok_s": mean("throughput/train_tokens_per_s"),
        "step_s": mean("time/step_s"),
        "sync_s": mean("time/sync_s"),
        "peak_gib": max((r.get("memory/peak_gib", float("nan")) for r in rows), default=float("nan")),
    }


def run_job(job: Job, out: Path, dry_run: bool) -> dict[str, float] | None:
    import yaml

    from cascade_envs.trainer.checks import config_from_dict

    checked = config_from_dict(job.config)  # a config error fails here, before any GPU work
    path = out / f"{job.name}.yaml"
    path.write_text(yaml.safe_dump(job.config), encoding="utf-8")
    argv = command(path, checked.train.world_size)
    ray = f", Ray on GPUs {job.ray_gpus}" if job.ray_gpus else ""
    print(f"[gpu_check] {job.name} (trainer on GPUs {job.trainer_gpus}{ray}): {' '.join(argv)}", flush=True)
    if dry_run:
        return None
    start = time.monotonic()
    ray_cluster(job.ray_gpus, start=True)
    try:
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": job.trainer_gpus}
        done = subprocess.run(argv, cwd=ROOT, env=env, timeout=420, check=False)
    finally:
        ray_cluster(job.ray_gpus, start=False)
    if done.returncode != 0:
        raise SystemExit(
            f"[gpu_check] {job.name} failed (exit {done.returncode}) after {time.monotonic() - start:.0f} s"
        )
    return summary(Path(job.config["train"]["output_dir"]) / "metrics.jsonl")


def equivalence(out: Path, dry_run: bool) -> str:  # on a CPU machine (--equivalence-only) it runs on gloo
    """One GRPO and one MOPD step on 2 NCCL ranks vs one process, on the same fixed batch (float32, no TF32)."""
    sys.path.insert(0, str(ROOT))
    from tests.trainer.test_parallel import config_data
    from tests.trainer.toys import save_tiny

    model = save_tiny(out / "tiny")
    teacher = save_tiny(out / "teacher", seed=2)
    exact = {"mixed_precision": "no", "path": str(model), "device": "auto"}
    grpo = config_data(model, out / "eq-g")
    mopd = config_data(
        model, out / "eq-m", algorithm="mopd", mopd={"teachers": {"test/SayYes-v0": str(teacher)}}
    )
    mopd["rollout"] |= {"group_size": 1, "prompts_per_step": 4, "max_tokens": 6}
    cases = [
        {
            "name": "grpo",
            "config": grpo | {"model": exact},
            "batch": {"groups": 4, "group_size": 4, "seed": 1},
        },
        {
            "name": "mopd",
            "config": mopd | {"model": exact},
            "batch": {"groups": 8, "group_size": 1, "seed": 2},
        },
    ]
    spec = out / "spec.json"
    spec.write_text(json.dumps(cases))
    argv = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node=2",
        "--max-restarts=0",
    ]
    argv += ["-m", "tests.trainer.parallel_worker", "--steps", str(spec), str(out / "eq.pt")]
    print(f"[gpu_check] equivalence: {' '.join(argv)}", flush=True)
    if dry_run:
        return "dry run"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NVIDIA_TF32_OVERRIDE": "0"}
    subprocess.run(argv, cwd=ROOT, env=env, timeout=300, check=True)
    import torch

    from cascade_envs.trainer.checks import config_from_dict
    from cascade_envs.trainer.loop import Trainer
    from tests.trainer.parallel_worker import fixed_batch
    from tests.trainer.toys import register_toys

    register_toys()
    results = torch.load(out / "eq.pt", weights_only=False)
    worst = {}
    for case in cases:
        data = case["config"]
        data["train"] = {**data["train"], "world_size": 1, "output_dir": str(out / f"one-{case['name']}")}
        trainer = Trainer(config_from_dict(data))
        trainer._optimize(fixed_batch(**case["batch"]), 1)
        state = {k: v.float().cpu() for k, v in trainer.model.state_dict().items()}
        trainer.close()
        sharded = results[case["name"]]["weights"]
        worst[case["name"]] = max((sharded[k].float().cpu() - v).abs().max().item() for k, v in state.items())
    verdict = "PASS" if max(worst.values()) <= 1e-5 else "FAIL"
    return (
        f"{verdict} max |w_2ranks - w_1process|: "
        + ", ".join(f"{k} {v:.2e}" for k, v in worst.items())
        + " (tolerance 1e-5)"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, required=True)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "gpu_vllm_check")
    parser.add_argument("--dry-run", action="store_true")
    parser.add_argument("--equivalence-only", action="store_true", help="only the 2-rank check (CPU: gloo)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.equivalence_only:
        result = equivalence(args.out, args.dry_run)
        print(f"2 ranks vs 1: {result}")
        return 1 if result.startswith("FAIL") else 0
    rows = {}
    for job in jobs(args.gpus, args.steps, args.out):
        rows[job.name] = run_job(job, args.out, args.dry_run)
    eq = (
        equivalence(args.out, args.dry_run)
        if args.gpus >= 2
        else f"SKIP: needs 2 GPUs, this machine has {args.gpus}"
    )
    print(f"\n{'job':<14} {'gen tok/s':>10} {'train tok/s':>12} {'step s':>8} {'sync s':>8} {'peak GiB':>9}")
    for name, row in rows.items():
        if row is None:
            print(f"{name:<14} (dry run)")
            continue
        print(
            f"{name:<14} {row['gen_tok_s']:>10.0f} {row['train_tok_s']:>12.0f} {row['step_s']:>8.2f} "
            f"{row['sync_s']:>8.3f} {row['peak_gib']:>9.2f}"
        )
    print(f"2 ranks vs 1 (GPU): {eq}")
    return 1 if eq.startswith("FAIL") else 0


if __name__ == "__main__":
    sys.exit(main())
