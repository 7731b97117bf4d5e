"""One GRPO step, this trainer vs. TRL's GRPOTrainer, on CPU or a GPU: step, generation, training pass, memory.

Both sides train the same model (a randomly initialised Llama body with SmolLM2's tokenizer: ``tiny``
by default, ``0.5b``/``1.5b`` in the shapes of Qwen2.5-0.5B/1.5B, or ``--model embedded`` for
SmolLM2-135M-Instruct itself) on the same prompts, with the same group size, completion length,
learning rate and reward, strictly on-policy: TRL is set to ``loss_type="dapo"`` (token-level
normalisation), ``beta=0`` (no KL / reference model) and ``num_iterations=1`` (one optimizer step per
generation batch), which is this trainer's GRPO. On a GPU both keep float32 weights and run bf16
autocast (TRL: ``bf16=True``) with activation checkpointing. Each side runs in its own subprocess (so
peak memory is its own), ``--repeats`` times, alternating with the other side; each repeat gives one
ratio (our step time / TRL's, the two runs back to back), and the table reports the median run of
each side and the median and spread (min-max) of the ratio over the repeats. The first step of a run
is a warm-up and is not timed. Both sides train on the same prompts in the same order (the draws of
this trainer's seeded mix; no oversampling here, so each step plays exactly ``--prompts`` prompts)
and stop on the same end tokens. A sample cut at the length cap gets the env's truncation reward
(0), or with ``--score-cut`` the same reward as a finished one (a random model never ends its
answers, and all-zero rewards would train nothing).

Per side and step: the step's time, the generation's (ours: the engine's share of the rollouts;
TRL: its ``_generate_single_turn``), the training pass's (forward and backward of the loss; ours:
``time/passes_s``; TRL: ``training_step`` less ``_prepare_inputs``), generated and trained tokens,
peak memory (GPU: ``max_memory_allocated``; CPU: peak RSS), and ours the mean |train - inference|
logprob of the sampled tokens. ``bench/gpu_check.py`` drives this file's sides on a GPU.

    python bench/bench_grpo_vs_trl.py [--device cpu|cuda] [--model tiny|embedded|0.5b|1.5b] [--steps 3]
        [--prompts 4] [--group 4] [--max-tokens 32] [--repeats 3] [--no-packing] [--score-cut]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_learning_vs_trl import (
    prompt_order,
    score_completions,
    spawn,
    training_config,
    trl_completion,
    trl_rows,
    trl_trainer,
)

import cascade_envs
from cascade_envs import Env, Reward
from cascade_envs.episode import Turn

PROMPTS = [
    "Write one sentence about the sea.",
    "Name three colours.",
    "What is the capital of France?",
    "Give a short tip for learning to cook.",
    "Describe a cat in five words.",
    "Count from one to five.",
    "Say something kind.",
    "What is 7 times 6?",
]

SHAPES: dict[str, dict[str, Any]] = {
    "tiny": {"hidden_size": 192, "intermediate_size": 512, "num_hidden_layers": 4, "num_attention_heads": 4},
    # Qwen2.5-0.5B / 1.5B bodies (Llama blocks, no attention bias) with SmolLM2's vocabulary: 0.4B / 1.4B
    "0.5b": {
        "hidden_size": 896,
        "intermediate_size": 4864,
        "num_hidden_layers": 24,
        "num_attention_heads": 14,
    },
    "1.5b": {
        "hidden_size": 1536,
        "intermediate_size": 8960,
        "num_hidden_layers": 28,
        "num_attention_heads": 12,
    },
    # the CPU smoke of bench/gpu_check.py
    "smoke-a": {
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
    },
    "smoke-b": {
        "hidden_size": 96,
        "intermediate_size": 192,
        "num_hidden_layers": 3,
        "num_attention_heads": 3,
    },
}
MODELS = ["embedded", *SHAPES]


def reward_of(text: str) -> float:
    """A deterministic reward with spread inside every group (so no group is filtered out)."""
    return (len(text.strip()) % 11) / 10.0


class BenchEnv(Env):
    """Scores every answer with ``reward_of``."""

    async def ascore(self, task: Any, answer: str) -> Reward:
        return Reward(reward_of(answer))


class ScoreCutEnv(BenchEnv):
    """``BenchEnv`` that also scores an answer cut at the length cap with ``reward_of`` (no overlong 0)."""

    async def aturn(self, episode: Any, completion: Any) -> Turn:
        if completion.truncated:
            return Turn(reward=Reward(reward_of(str(completion))), done=True)
        return Turn(done=True)


def bench_tokenizer(tokenizer_dir: str | None) -> str:
    """The tokenizer folder: ``tokenizer_dir``, else the embedded SmolLM2's (converted on first use)."""
    if tokenizer_dir:
        return tokenizer_dir
    from cascade_envs.policies.embedded import embedded_model_path

    return str(embedded_model_path())


def build_model(kind: str, folder: Path, tokenizer_dir: str | None = None, device: str = "cpu") -> Path:
    """Save the benchmark model (+ tokenizer) to ``folder`` and return it (initialised on ``device``,
    saved in float32)."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    source = bench_tokenizer(tokenizer_dir)
    if kind == "embedded":
        return Path(source)
    tokenizer = AutoTokenizer.from_pretrained(source)
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        num_key_value_heads=2 if kind in ("tiny", "0.5b", "1.5b") else 1,
        max_position_embeddings=1024,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        **SHAPES[kind],
    )
    with torch.device(device):
        model = LlamaForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def peak_rss_mb() -> float:
    """This process's peak RSS (``VmHWM``). Not ``ru_maxrss``: on Linux that keeps the parent's peak
    across fork + exec, so every child would report at least the parent's RSS."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024  # kB
    return float("nan")


def peak_memory_gib(device: str) -> float:
    """Peak memory of this process: the GPU's allocated peak on CUDA, else the peak RSS."""
    import torch

    if device == "cuda":
        return torch.cuda.max_memory_allocated() / 2**30
    return peak_rss_mb() / 1024


def sync(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def register_bench_env(score_cut: bool = False) -> dict[str, Any]:
    """Register ``bench/Reward-v0`` over ``PROMPTS``; the mix both sides draw their prompts from."""
    cascade_envs.register(
        "bench/Reward-v0",
        ScoreCutEnv if score_cut else BenchEnv,
        tasks=[{"id": str(i), "prompt": p} for i, p in enumerate(PROMPTS)],
    )
    return {"bench/Reward-v0": 1.0}


def parameters(model: Any) -> int:
    """Distinct parameters (a tied embedding once)."""
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())


def run_ours(args: argparse.Namespace, model_dir: Path, out: Path) -> dict[str, Any]:
    from cascade_envs.trainer.loop import Trainer

    config = training_config(args, str(model_dir), out, register_bench_env(args.score_cut))
    config.rollout.max_oversampling = 1.0  # play exactly the step's prompts, as TRL does (equal work)
    config.train.packing = False if args.no_packing else "auto"
    if args.device == "cuda" or args.gpu_paths:
        config.optim.micro_batch_size = "auto"  # passes sized from free memory (trainer/layout.py)
    if args.gpu_paths:  # what the GPU defaults choose, on CPU: bf16 autocast, flex, static decoding
        config.model.mixed_precision = "bfloat16"
        config.model.attn_implementation = "flex_attention"
        config.rollout.engine_kwargs["decoding"] = "static"
    trainer = Trainer(config)
    keys = {
        "generation_s": "time/generation_s",
        "train_s": "time/passes_s",
        "generated_tokens": "throughput/generated_tokens",
        "sequence_tokens": "train/sequence_tokens",
        "gap": "train/inference_logprob_abs_diff",
        "reward": "reward/mean",
        "padded_tokens": "train/padded_tokens",
        "packed_tokens": "train/packed_tokens",
    }
    result: dict[str, Any] = {"step_s": [], "updated": [], **{k: [] for k in keys}}
    for _ in range(args.steps):
        start = time.perf_counter()
        metrics = trainer.train_step()
        sync(args.device)
        result["step_s"].append(time.perf_counter() - start)
        result["updated"].append(not metrics.get("skipped"))
        for name, key in keys.items():
            value = metrics.get(key)
            result[name].append(float("nan") if value is None else float(value))
    result.update(
        peak_gib=peak_memory_gib(args.device),
        peak_rss_mb=peak_rss_mb(),
        params=parameters(trainer.model),
        layout=trainer.layout_note,
        decoding=getattr(getattr(trainer.engine, "policy", None), "decoding", "n/a"),
        attention=str(trainer.model.config._attn_implementation),
    )
    trainer.close()
    return result


def run_trl(args: argparse.Namespace, model_dir: Path, out: Path) -> dict[str, Any]:
    from transformers import TrainerCallback

    from cascade_envs.data import prompt_messages
    from cascade_envs.policies.decoding import end_token_ids

    mix = register_bench_env(args.score_cut)
    order = prompt_order(mix, args.prompts * args.steps)  # the prompts ours draws, in its order
    env = cascade_envs.make("bench/Reward-v0")
    n = args.prompts * args.group
    result: dict[str, Any] = {
        k: [] for k in ("step_s", "generation_s", "train_s", "generated_tokens", "sequence_tokens", "reward")
    }
    end_ids: set[int] = set()

    def reward(completions: list, completion_ids: list, task_json: list, **_: Any) -> list[float]:
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        samples = [
            trl_completion(t, ids, end_ids, args.max_tokens)
            for t, ids in zip(texts, completion_ids, strict=True)
        ]
        return score_completions(env, [json.loads(t) for t in task_json], samples)

    class Timer(TrainerCallback):
        def __init__(self) -> None:
            self.start = 0.0
            self.seen = 0

        def on_step_begin(self, *a: Any, **k: Any) -> None:
            self.start = time.perf_counter()

        def on_step_end(self, _args: Any, state: Any, *a: Any, **k: Any) -> None:
            sync(args.device)
            result["step_s"].append(time.perf_counter() - self.start)
            result["sequence_tokens"].append(float(state.num_input_tokens_seen - self.seen))
            self.seen = state.num_input_tokens_seen

        def on_log(self, _args: Any, _state: Any, _control: Any, logs: dict | None = None, **k: Any) -> None:
            if logs and "completions/mean_length" in logs:
                result["generated_tokens"].append(float(round(logs["completions/mean_length"] * n)))
            if logs and "reward" in logs:
                result["reward"].append(float(logs["reward"]))

    trainer = trl_trainer(args, str(model_dir), out, trl_rows(order, prompt_messages), reward, [Timer()])
    end_ids.update(end_token_ids(trainer.model, trainer.processing_class))
    prepare_s: list[float] = []

    def timed(method: Any, into: list[float]) -> Any:
        def run(*a: Any, **k: Any) -> Any:
            sync(args.device)
            start = time.perf_counter()
            value = method(*a, **k)
            sync(args.device)
            into.append(time.perf_counter() - start)
            return value

        return run

    step_s: list[float] = []
    trainer._generate_single_turn = timed(trainer._generate_single_turn, result["generation_s"])
    trainer._prepare_inputs = timed(trainer._prepare_inputs, prepare_s)
    trainer.training_step = timed(trainer.training_step, step_s)
    trainer.train()
    result["train_s"] = [s - p for s, p in zip(step_s, prepare_s, strict=False)]
    result.update(
        peak_gib=peak_memory_gib(args.device), peak_rss_mb=peak_rss_mb(), params=parameters(trainer.model)
    )
    return result


def child(args: argparse.Namespace) -> None:
    import torch

    torch.manual_seed(0)
    model_dir, out = Path(args.model_dir), Path(args.out)
    if args.side == "build":  # --model may name several: each goes to model_dir/model-NAME
        kinds = args.model.split(",")
        paths = [
            build_model(
                k, model_dir / f"model-{k}" if len(kinds) > 1 else model_dir, args.tokenizer, args.device
            )
            for k in kinds
        ]
        print("RESULT " + json.dumps({"models": [str(p) for p in paths]}))
        return
    result = run_ours(args, model_dir, out) if args.side == "ours" else run_trl(args, model_dir, out)
    print("RESULT " + json.dumps(result))


def side_argv(args: argparse.Namespace, model_dir: Path, out: Path) -> list[str]:
    """The command line of a child side (everything but ``--side``)."""
    argv = ["--model-dir", str(model_dir), "--out", str(out), "--model", args.model, "--device", args.device]
    for name in ("steps", "prompts", "group", "max_tokens", "lr"):
        argv += [f"--{name.replace('_', '-')}", str(getattr(args, name))]
    if args.tokenizer:
        argv += ["--tokenizer", args.tokenizer]
    flags = (
        ("--no-packing", args.no_packing),
        ("--score-cut", args.score_cut),
        ("--gpu-paths", args.gpu_paths),
    )
    return argv + [flag for flag, on in flags if on]


def run_side(
    side: str, args: argparse.Namespace, model_dir: Path, tmp: Path, timeout_s: float = 3600
) -> dict[str, Any]:
    return spawn(__file__, side, side_argv(args, model_dir, tmp / side), timeout_s=timeout_s)


def timed_mean(values: list[float]) -> float:
    """Mean over the timed steps (the first is a warm-up)."""
    timed = [v for v in (values[1:] or values) if v == v]  # NaN: a skipped step's training pass
    return sum(timed) / len(timed) if timed else float("nan")


def per_step(result: dict[str, Any]) -> float:
    """Mean time of the timed steps (the first is a warm-up)."""
    return timed_mean(result["step_s"])


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--steps", type=int, default=3, help="steps per side; the first is a warm-up")
    p.add_argument("--prompts", type=int, default=4)
    p.add_argument("--group", type=int, default=4)
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--lr", type=float, default=3e-6)
    p.add_argument("--model", default="tiny", help=f"one of {', '.join(MODELS)}")
    p.add_argument("--tokenizer", help="tokenizer folder (default: the embedded SmolLM2's)")
    p.add_argument(
        "--repeats", type=int, default=3, help="runs per side, alternating; median and spread are reported"
    )
    p.add_argument("--no-packing", action="store_true", help="train.packing off on our side")
    p.add_argument("--score-cut", action="store_true", help="score answers cut at the length cap too")
    p.add_argument(
        "--gpu-paths",
        action="store_true",
        help="our side on CPU through what a GPU's defaults choose: bf16 autocast, flex_attention (so the "
        "layout is measured), static decoding",
    )
    p.add_argument("--save-runs", help="also write every run's measurements to this JSON file")
    p.add_argument("--side", choices=["ours", "trl", "build"], help=argparse.SUPPRESS)
    p.add_argument("--model-dir", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    return p


def main() -> None:
    ap = parser()
    args = ap.parse_args()
    unknown = [k for k in args.model.split(",") if k not in MODELS]
    if unknown or ("," in args.model and args.side != "build"):
        ap.error(f"--model must be one of {', '.join(MODELS)}")
    if args.side:
        child(args)
        return
    if args.steps < 2:
        ap.error("--steps must be at least 2 (the first step is a warm-up)")
    with tempfile.TemporaryDirectory(prefix="bench-grpo-") as tmp_name:
        tmp = Path(tmp_name)
        model_dir = tmp / "model"
        if args.model == "embedded":
            model_dir = build_model("embedded", model_dir, args.tokenizer)
        else:
            spawn(__file__, "build", side_argv(args, model_dir, tmp / "build"), timeout_s=900)
        runs: dict[str, list[dict[str, Any]]] = {"ours": [], "trl": []}
        for i in range(args.repeats):  # alternate the sides, so load from other processes hits both
            for side in runs:
                runs[side].append(run_side(side, args, model_dir, tmp))
            ratio = per_step(runs["ours"][-1]) / per_step(runs["trl"][-1])
            print(
                f"repeat {i + 1}: ours {per_step(runs['ours'][-1]):.2f} s, TRL {per_step(runs['trl'][-1]):.2f} s, ours/TRL {ratio:.2f}x",
                flush=True,
            )
    if args.save_runs:
        Path(args.save_runs).write_text(json.dumps(runs))
    report(args, runs)


def median_run(results: list[dict[str, Any]]) -> dict[str, Any]:
    return sorted(results, key=per_step)[(len(results) - 1) // 2]


def report(args: argparse.Namespace, runs: dict[str, list[dict[str, Any]]]) -> None:
    import torch
    import trl as trl_module

    ratios = [per_step(o) / per_step(t) for o, t in zip(runs["ours"], runs["trl"], strict=True)]
    ours, trl = median_run(runs["ours"]), median_run(runs["trl"])
    where = (
        f"CPU ({torch.get_num_threads()} threads)" if args.device == "cpu" else torch.cuda.get_device_name()
    )
    print(
        f"GRPO step on {where}: model={args.model}, {args.prompts} prompts x "
        f"{args.group} rollouts, max {args.max_tokens} new tokens, {args.steps - 1} timed step(s), "
        f"{args.repeats} runs per side (median run shown), packing {'off' if args.no_packing else 'auto'}; "
        f"trl {trl_module.__version__}"
    )
    print(f"{'':<30}{'cascade-envs':>14}{'TRL':>14}{'ours / TRL':>12}")

    def row(name: str, a: float, b: float, fmt: str = ".2f") -> None:
        print(f"{name:<30}{a:>14{fmt}}{b:>14{fmt}}{a / b:>11.2f}x")

    a, b = per_step(ours), per_step(trl)
    row("time per step (s)", a, b)
    row("generation (s)", timed_mean(ours["generation_s"]), timed_mean(trl["generation_s"]))
    row("training pass (s)", timed_mean(ours["train_s"]), timed_mean(trl["train_s"]), ".3f")
    unit = "GiB" if args.device == "cuda" else "MiB"
    scale = 1.0 if args.device == "cuda" else 1024.0
    row(
        f"peak memory ({unit})",
        ours["peak_gib"] * scale,
        trl["peak_gib"] * scale,
        ".1f" if scale == 1 else ".0f",
    )
    ta, tb = timed_mean(ours["generated_tokens"]), timed_mean(trl["generated_tokens"])
    row("generated tokens per step", ta, tb, ".0f")
    row("time per generated token (ms)", a / ta * 1e3, b / tb * 1e3, ".1f")
    ra = statistics.mean(r for run in runs["ours"] for r in run["reward"])
    rb = statistics.mean(r for run in runs["trl"] for r in run["reward"]) if trl["reward"] else float("nan")
    print(f"{'mean reward (all runs)':<30}{ra:>14.3f}{rb:>14.3f}")
    print(
        f"{'train tokens: padded/packed':<30}{timed_mean(ours['padded_tokens']):>14.0f}"
        f"{timed_mean(ours['packed_tokens']):>14.0f}  (per step, our side)"
    )
    gaps = ours["gap"]
    print(
        f"{'|train - inference| logprob':<30}{gaps[0]:>14.4f}  step 1, {timed_mean(gaps):.4f} later (our side)"
    )
    print(f"our layout: {ours['layout']}; decoding: {ours['decoding']}; attention: {ours['attention']}")
    print(
        f"ours / TRL step time over {len(ratios)} repeats: median {statistics.median(ratios):.2f}x, "
        f"spread {min(ratios):.2f}-{max(ratios):.2f}x ({', '.join(f'{r:.2f}' for r in ratios)})"
    )


if __name__ == "__main__":
    main()
