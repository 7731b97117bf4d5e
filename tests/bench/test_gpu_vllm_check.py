"""``.ci/gpu_vllm.sh`` and ``bench/gpu_vllm_check.py`` on a machine without a GPU: the script refuses with one line
and runs nothing, and every job's config passes the trainer's checks (the dry run)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_gpu_sh_refuses_without_nvidia_smi(tmp_path):
    bin_dir = tmp_path / "bin"  # a PATH with no nvidia-smi, even on a GPU machine
    bin_dir.mkdir()
    (bin_dir / "dirname").symlink_to(shutil.which("dirname") or "/usr/bin/dirname")
    done = subprocess.run(
        ["/bin/bash", str(ROOT / ".ci" / "gpu_vllm.sh")],
        env={"PATH": str(bin_dir), "GPU_VENV": str(tmp_path / "venv")},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "gpu_vllm.sh: refused: nvidia-smi not found; this check needs a machine with NVIDIA GPUs (nothing was run)"
    )
    assert not (tmp_path / "venv").exists()


def test_gpu_check_dry_run_checks_every_job(tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    command = [
        sys.executable,
        str(ROOT / "bench" / "gpu_vllm_check.py"),
        "--gpus",
        "2",
        "--dry-run",
        "--out",
        str(tmp_path),
    ]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    for job in ("grpo-1", "mopd-1", "grpo-ray-2", "grpo-sep"):
        assert f"[gpu_check] {job} (" in done.stdout and (tmp_path / f"{job}.yaml").is_file()
    assert "--nproc 2" in done.stdout and "2 ranks vs 1 (GPU): dry run" in done.stdout


def test_summary_skips_the_warm_up_step(tmp_path):
    sys.path.insert(0, str(ROOT / "bench"))
    from gpu_vllm_check import summary

    rows = [
        {"time/step_s": 100.0, "throughput/generation_tokens_per_s": 1.0, "memory/peak_gib": 9.0},
        {
            "time/step_s": 2.0,
            "time/sync_s": 0.5,
            "throughput/generation_tokens_per_s": 300.0,
            "memory/peak_gib": 3.0,
        },
        {
            "time/step_s": 4.0,
            "time/sync_s": 0.7,
            "throughput/generation_tokens_per_s": 500.0,
            "memory/peak_gib": 3.5,
        },
    ]
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(__import__("json").dumps(r) + "\n" for r in rows))
    got = summary(path)
    assert (
        got["step_s"] == 3.0 and got["sync_s"] == 0.6 and got["gen_tok_s"] == 400.0 and got["peak_gib"] == 3.5
    )
