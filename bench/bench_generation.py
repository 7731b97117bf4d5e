"""Generation only, on CPU: transformers ``generate`` (dynamic / static KV cache), our HFPolicy, vLLM CPU.

Every variant does the same work: the first ``--prompts`` rows of the bundled easy
instruction-following set (``cascade/InstructionFollowing-v0``), rendered with the chat template,
each sampled ``--group`` times (a GRPO group) for at most ``--max-tokens`` tokens at temperature 1
(top-p 1, no top-k), stopping on every end token of the tokenizer, with fixed seeds, ``--threads``
torch threads and ``--dtype`` weights. Variants:

- ``generate``: one ``model.generate(do_sample=True)`` on the group-repeated prompts, dynamic KV
  cache (what TRL's GRPOTrainer runs on CPU); the baseline of the ratio columns.
- ``generate-static``: the same with ``cache_implementation="static"``;
  ``generate-static-compile`` adds transformers' automatic ``torch.compile`` of the decode step.
- ``ours-generate`` / ``ours-shared``: ``HFPolicy.generate_groups`` with ``decoding="generate"`` /
  ``"shared"`` (the default where the model supports it: one prefill per distinct prompt, ended
  rows leave the batch).
- ``vllm``: vLLM's CPU engine (built as the trainer builds it, ``VLLMEngine``) with ``n=group`` per
  prompt; ``vllm-engine``: the trainer's ``VLLMEngine.generate`` (one request per sample).
  Both run with the python of ``--vllm-python`` and are skipped with the reason when it is absent.

Each variant runs in its own subprocess (so its peak RSS is its own): startup (model load or
engine build), one warm-up round, then ``--repeats`` timed rounds with the same seed; the round
with the least time per token counts (for every variant but vLLM, whose requests are unseeded as
in the trainer, all rounds draw the same samples, so that is the fastest round). For vLLM, one
trainer-to-vLLM weight sync is timed too. Reported: startup, the warm-up's extra time over the
counted round (compilation, lazy init), seconds per round, CPU seconds per wall second, generated
tokens (up to and including the end token), ms per generated token, the ratios of both to
``generate`` and peak RSS.

    python bench/bench_generation.py [--prompts 4] [--group 8] [--max-tokens 48] [--threads 2]
        [--dtype float32] [--variants generate,ours-generate,...] [--repeats 2] [--model embedded|tiny]
        [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench_grpo_vs_trl import build_model, peak_rss_mb
from bench_learning_vs_trl import SideFailed, spawn

ROOT = Path(__file__).resolve().parents[1]
ENV_ID = "cascade/InstructionFollowing-v0"
ROWS = "bundled:instruction_following/easy.jsonl"
HF_VARIANTS = ("generate", "generate-static", "generate-static-compile", "ours-generate", "ours-shared")
VLLM_VARIANTS = ("vllm", "vllm-engine")
VARIANTS = HF_VARIANTS + VLLM_VARIANTS
Round = Callable[[int], int]  # seed -> generated tokens
Extra = dict[str, Callable[[], float]]  # more measurements, taken after the timed rounds


# -- the children: one variant each ---------------------------------------------------------------


def count_tokens(rows: list[list[int]], end_ids: set[int]) -> int:
    """Generated tokens per row, up to and including the first end token (padding after it not counted)."""
    return sum(next((j + 1 for j, t in enumerate(row) if t in end_ids), len(row)) for row in rows)


def hf_generate(args: argparse.Namespace, prompts: list[list[dict]], extra: Extra) -> Round:
    """Plain ``model.generate`` on the group-repeated, left-padded prompts (TRL's CPU generation)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, CompileConfig

    from cascade_envs.policies.decoding import end_token_ids
    from cascade_envs.policy import render_chat_prompt

    model = AutoModelForCausalLM.from_pretrained(args.model_dir, dtype=args.dtype).eval()
    tokenizer = AutoTokenizer.from_pretrained(args.model_dir, padding_side="left")
    end_ids = end_token_ids(model, tokenizer)
    if tokenizer.pad_token is None:
        tokenizer.pad_token_id = min(end_ids)
    texts = [render_chat_prompt(tokenizer, m, True) for m in prompts for _ in range(args.group)]
    batch = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    width = batch["input_ids"].shape[1]
    options: dict[str, Any] = {
        "do_sample": True,
        "temperature": 1.0,
        "top_p": 1.0,
        "top_k": 0,
        "max_new_tokens": args.max_tokens,
        "eos_token_id": sorted(end_ids),
        "pad_token_id": tokenizer.pad_token_id,
        "disable_compile": True,
    }
    if args.side != "generate":
        options["cache_implementation"] = "static"
    if args.side == "generate-static-compile":
        config = CompileConfig(mode="default")  # "reduce-overhead" means CUDA graphs: nothing on CPU
        config._compile_all_devices = True  # type: ignore[assignment]  # else transformers compiles on GPUs only
        options.update(disable_compile=False, compile_config=config)

    def run(seed: int) -> int:
        torch.manual_seed(seed)
        with torch.inference_mode():
            out = model.generate(**batch, **options)
        if args.side == "generate-static-compile" and not hasattr(model, "_compiled_call"):
            raise RuntimeError("transformers did not compile the decode step (auto-compile criteria not met)")
        return count_tokens(out[:, width:].tolist(), end_ids)

    return run


def ours(args: argparse.Namespace, prompts: list[list[dict]], extra: Extra) -> Round:
    """``HFPolicy.generate_groups`` with the variant's ``decoding``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from cascade_envs.policies.hf import HFPolicy
    from cascade_envs.policy import SamplingParams

    mode = args.side.removeprefix("ours-")
    model = AutoModelForCausalLM.from_pretrained(args.model_dir, dtype=args.dtype).eval()
    tokenizer = AutoTokenizer.from_pretrained(args.model_dir)
    policy = HFPolicy(model, tokenizer, max_batch_size=64, decoding=mode)

    def run(seed: int) -> int:
        sampling = SamplingParams(max_tokens=args.max_tokens, temperature=1.0, top_p=1.0, seed=seed)
        with torch.inference_mode():
            groups = policy.generate_groups(prompts, sampling, group_size=args.group)
        return sum(len(c.token_ids or ()) for group in groups for c in group)

    return run


def vllm_cpu(args: argparse.Namespace, prompts: list[list[dict]], extra: Extra) -> Round:
    """vLLM's CPU engine, built as the trainer's ``VLLMEngine`` builds it (in-process, eager on CPU).

    Requests carry no seed of their own, as in the trainer (a per-request seed puts vLLM on its
    per-row generator path); the engine's seed (``--seed``) makes the run reproducible, so the
    rounds draw different samples and their token counts differ.
    """
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB
    from cascade_envs.policy import SamplingParams
    from cascade_envs.trainer.vllm_engine import VLLMEngine

    engine = VLLMEngine(args.model_dir, dtype=args.dtype, seed=args.seed)
    import vllm

    def weight_sync() -> float:
        """One trainer-to-vLLM weight sync (what every GRPO step pays on top of generation)."""
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(args.model_dir, dtype=args.dtype)
        engine.sync_weights(model)  # warm-up
        start = time.perf_counter()
        engine.sync_weights(model)
        return time.perf_counter() - start

    extra["weight_sync_s"] = weight_sync

    if args.side == "vllm-engine":  # the trainer's path: one request per sample, sampled-token logprobs
        messages = [m for m in prompts for _ in range(args.group)]

        def run_engine(_seed: int) -> int:
            sampling = SamplingParams(max_tokens=args.max_tokens, temperature=1.0, top_p=1.0)
            return sum(len(c.token_ids or ()) for c in engine.generate(messages, sampling))

        return run_engine
    inputs = [{"prompt_token_ids": engine.encode_prompt(m)} for m in prompts]

    def run(_seed: int) -> int:
        params = vllm.SamplingParams(
            n=args.group,
            max_tokens=args.max_tokens,
            temperature=1.0,
            top_p=1.0,
            logprobs=0,
            stop_token_ids=engine.end_token_ids or None,
            skip_special_tokens=False,
        )
        outputs = engine.llm.generate(inputs, params, use_tqdm=False)
        return sum(len(o.token_ids) for request in outputs for o in request.outputs)

    return run


def child(args: argparse.Namespace) -> dict[str, Any]:
    """Build the variant, warm it up, time ``--repeats`` rounds; the numbers (or a skip reason)."""
    import torch

    torch.set_num_threads(args.threads)
    prompts = json.loads(Path(args.prompts_file).read_text())
    start = time.perf_counter()
    build = vllm_cpu if args.side in VLLM_VARIANTS else ours if args.side.startswith("ours-") else hf_generate
    extra: Extra = {}
    run = build(args, prompts, extra)
    startup = time.perf_counter() - start
    rounds = []  # (wall s, CPU s of this process, generated tokens)
    for _ in range(args.repeats + 1):  # the first is the warm-up
        start, cpu = time.perf_counter(), time.process_time()
        tokens = run(args.seed)
        rounds.append((time.perf_counter() - start, time.process_time() - cpu, tokens))
    # The round with the least time per token: the fastest one where every round draws the same samples.
    best_s, best_cpu, best_tokens = min(rounds[1:], key=lambda r: r[0] / max(r[2], 1))
    return {
        "startup_s": startup,
        "warmup_s": rounds[0][0],
        "warmup_extra_s": rounds[0][0] - best_s,
        "round_s": best_s,
        "cpu_per_wall": best_cpu / best_s,
        "tokens": best_tokens,
        "ms_per_token": 1e3 * best_s / max(best_tokens, 1),
        "rounds": rounds,
        "torch": torch.__version__,
        **{name: measure() for name, measure in extra.items()},
        "peak_rss_mb": peak_rss_mb(),
    }


# -- the parent: prompts, one subprocess per variant, the table -----------------------------------


def bench_prompts(n: int) -> list[list[dict]]:
    """The opening messages of the first ``n`` bundled easy instruction-following rows."""
    import cascade_envs
    from cascade_envs.env import run_sync

    env = cascade_envs.make(ENV_ID, tasks=ROWS)
    try:
        tasks = list(env.tasks or [])
        if len(tasks) < n:
            raise SystemExit(f"--prompts {n}: {ROWS} has only {len(tasks)} rows")
        return [env.prompt(loaded.task) for loaded in tasks[:n]]
    finally:
        run_sync(env.aclose())


def run_variant(python: str, variant: str, argv: list[str], threads: int, timeout_s: float) -> dict[str, Any]:
    """One variant in a fresh subprocess of ``python``: its ``RESULT`` dict, or ``{"skipped": reason}``.

    ``OMP_NUM_THREADS`` is set too: vLLM's CPU engine otherwise drops to one torch thread.
    """
    try:
        return spawn(__file__, variant, argv, timeout_s, python=python, env={"OMP_NUM_THREADS": str(threads)})
    except SideFailed as failed:
        return {"skipped": failed.reason}


def report(results: dict[str, dict[str, Any]], args: argparse.Namespace) -> None:
    base = results["generate"]
    print(
        f"generation on CPU: {Path(args.model_dir).name} {args.dtype}, {args.threads} threads, {args.prompts} prompts "
        f"x {args.group} samples, <= {args.max_tokens} tokens, temperature 1, best of {args.repeats} after a warm-up"
    )
    head = (
        "variant",
        "startup s",
        "warm-up+ s",
        "s/round",
        "cpu/wall",
        "tokens",
        "ms/token",
        "x ms/tok",
        "x s/round",
        "peak RSS MB",
    )
    print(f"{head[0]:<26}" + "".join(f"{h:>12}" for h in head[1:]))
    for name, r in results.items():
        if "skipped" in r:
            print(f"{name:<26}  skipped: {r['skipped']}")
            continue
        cells = (
            f"{r['startup_s']:.2f}",
            f"{r['warmup_extra_s']:.2f}",
            f"{r['round_s']:.2f}",
            f"{r['cpu_per_wall']:.2f}",
            str(r["tokens"]),
            f"{r['ms_per_token']:.2f}",
            f"{r['ms_per_token'] / base['ms_per_token']:.2f}",
            f"{r['round_s'] / base['round_s']:.2f}",
            f"{r['peak_rss_mb']:.0f}",
        )
        print(f"{name:<26}" + "".join(f"{c:>12}" for c in cells))
    for name, r in results.items():
        if "weight_sync_s" in r:
            print(
                f"{name}: one trainer-to-vLLM weight sync takes {r['weight_sync_s']:.2f} s (paid every training step); "
                "its peak RSS includes the trainer's copy of the model, as in training"
            )
    print(
        "warm-up+ = the warm-up round's time over the counted round (compilation, lazy init); cpu/wall = CPU "
        "seconds of the process per wall second (threads kept busy); x = ratio to generate (lower is faster)"
    )


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads in every variant")
    parser.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], default="float32")
    parser.add_argument(
        "--variants", default=",".join(VARIANTS), help=f"comma-separated, of: {', '.join(VARIANTS)}"
    )
    parser.add_argument(
        "--repeats", type=int, default=2, help="timed rounds after the warm-up; the fastest counts"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--model",
        choices=["embedded", "tiny"],
        default="embedded",
        help="SmolLM2-135M-Instruct, or a small random Llama with its tokenizer (smoke tests)",
    )
    parser.add_argument(
        "--vllm-python",
        default=str(ROOT / ".venv-vllm" / "bin" / "python"),
        help="python of the venv with vllm-cpu (bash .ci/vllm.sh builds it)",
    )
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per variant")
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument("--side", choices=VARIANTS, help=argparse.SUPPRESS)
    parser.add_argument("--model-dir", help=argparse.SUPPRESS)
    parser.add_argument("--prompts-file", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.variant_list = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = sorted(set(args.variant_list) - set(VARIANTS))
    if unknown:
        parser.error(f"--variants: unknown {', '.join(unknown)} (known: {', '.join(VARIANTS)})")
    if "generate" not in args.variant_list:
        args.variant_list.insert(0, "generate")  # the baseline of every ratio
    for name in ("prompts", "group", "max_tokens", "threads", "repeats"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    return args


def main() -> None:
    args = parse_args()
    if args.side:
        print("RESULT " + json.dumps(child(args)))
        return
    prompts = bench_prompts(args.prompts)
    with tempfile.TemporaryDirectory(prefix="bench-generation-") as tmp_name:
        tmp = Path(tmp_name)
        args.model_dir = str(build_model(args.model, tmp / "model"))
        prompts_file = tmp / "prompts.json"
        prompts_file.write_text(json.dumps(prompts))
        argv = [
            "--model-dir",
            args.model_dir,
            "--prompts-file",
            str(prompts_file),
            "--group",
            str(args.group),
            "--max-tokens",
            str(args.max_tokens),
            "--threads",
            str(args.threads),
            "--dtype",
            args.dtype,
            "--repeats",
            str(args.repeats),
            "--seed",
            str(args.seed),
        ]
        results: dict[str, dict[str, Any]] = {}
        for variant in args.variant_list:
            python = args.vllm_python if variant in VLLM_VARIANTS else sys.executable
            if variant in VLLM_VARIANTS and not Path(python).is_file():
                results[variant] = {
                    "skipped": f"no vLLM python at {python} (bash .ci/vllm.sh builds .venv-vllm)"
                }
            else:
                print(f"running {variant} ...", file=sys.stderr, flush=True)
                results[variant] = run_variant(python, variant, argv, args.threads, args.timeout)
    if "skipped" in results["generate"]:
        sys.exit(f"the baseline generate {results['generate']['skipped']}")
    report(results, args)
    if args.json:
        config = {
            k: getattr(args, k)
            for k in ("prompts", "group", "max_tokens", "threads", "dtype", "repeats", "seed", "model")
        }
        Path(args.json).write_text(json.dumps({"config": config, "results": results}, indent=2))


if __name__ == "__main__":
    main()
