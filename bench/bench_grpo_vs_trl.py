"""One GRPO step, this trainer vs. TRL's Trainer, on CPU: time per step and peak memory.

Both sides train the same model (a small randomly initialised Llama with SmolLM2's tokenizer by
default, or ``--model embedded`` for SmolLM2-135M-Instruct itself) on the same prompts, with the
same group size, completion length, learning rate and reward, strictly on-policy: TRL is set to
``loss_type="dapo"`` (token-level normalisation), ``beta=0`` (no KL / reference model) and
``num_iterations=1`` (one optimizer step per generation batch), which is this trainer's GRPO.
Each side runs in its own subprocess (so peak RSS is its own), ``--repeats`` times, alternating
with the other side; each repeat gives one ratio (our step time / TRL's, the two runs back to back),
and the table reports the median run of each side and the median and spread (min-max) of the
ratio over the repeats. The first step of a run is a warm-up and is not timed. A step covers generation, reward and the optimizer update on both sides. Both sides
train on the same prompts in the same order (the draws of this trainer's seeded mix; no
oversampling here, so each step plays exactly ``--prompts`` prompts), stop on the same end
tokens, and score a sample cut at the length cap with the env's truncation reward (0); time per
generated token is reported next to time per step, since the two sides sample different lengths.

    python bench/bench_grpo_vs_trl.py [--steps 3] [--prompts 4] [--group 4] [--max-tokens 32] [--model tiny|embedded] [--repeats 3] [--no-packing]
"""

from __future__ import annotations

import argparse
import json
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


def reward_of(text: str) -> float:
    """A deterministic reward with spread inside every group (so no group is filtered out)."""
    return (len(text.strip()) % 11) / 10.0


class BenchEnv(Env):
    """Scores every answer with ``reward_of``."""

    async def ascore(self, task: Any, answer: str) -> Reward:
        return Reward(reward_of(answer))


def build_model(kind: str, folder: Path) -> Path:
    """Save the benchmark model (+ tokenizer) to ``folder`` and return it."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from cascade_envs.policies.embedded import embedded_model_path

    source = embedded_model_path()
    if kind == "embedded":
        return Path(source)
    tokenizer = AutoTokenizer.from_pretrained(source)
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=192,
        intermediate_size=512,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
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


def register_bench_env() -> dict[str, Any]:
    """Register ``bench/Reward-v0`` over ``PROMPTS``; the mix both sides draw their prompts from."""
    cascade_envs.register(
        "bench/Reward-v0", BenchEnv, tasks=[{"id": str(i), "prompt": p} for i, p in enumerate(PROMPTS)]
    )
    return {"bench/Reward-v0": 1.0}


def run_ours(args: argparse.Namespace, model_dir: Path, out: Path) -> dict[str, Any]:
    from cascade_envs.trainer.loop import Trainer

    config = training_config(args, str(model_dir), out, register_bench_env())
    config.rollout.max_oversampling = 1.0  # play exactly the step's prompts, as TRL does (equal work)
    config.train.packing = not args.no_packing
    trainer = Trainer(config)
    times, tokens, rewards, padded, packed = [], [], [], [], []
    for _ in range(args.steps):
        start = time.perf_counter()
        metrics = trainer.train_step()
        times.append(time.perf_counter() - start)
        tokens.append(metrics["throughput/generated_tokens"])
        rewards.append(metrics["reward/mean"])
        padded.append(metrics.get("train/padded_tokens", float("nan")))
        packed.append(metrics.get("train/packed_tokens", float("nan")))
    trainer.close()
    return {
        "step_s": times,
        "generated_tokens": tokens,
        "reward": rewards,
        "padded_tokens": padded,
        "packed_tokens": packed,
        "peak_rss_mb": peak_rss_mb(),
    }


def run_trl(args: argparse.Namespace, model_dir: Path, out: Path) -> dict[str, Any]:
    from transformers import TrainerCallback

    from cascade_envs.data import prompt_messages
    from cascade_envs.policies.decoding import end_token_ids

    mix = register_bench_env()
    order = prompt_order(mix, args.prompts * args.steps)  # the prompts ours draws, in its order
    env = cascade_envs.make("bench/Reward-v0")
    n = args.prompts * args.group
    tokens: list[int] = []
    rewards: list[float] = []
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
            self.times: list[float] = []
            self.start = 0.0

        def on_step_begin(self, *a: Any, **k: Any) -> None:
            self.start = time.perf_counter()

        def on_step_end(self, *a: Any, **k: Any) -> None:
            self.times.append(time.perf_counter() - self.start)

        def on_log(self, _args: Any, _state: Any, _control: Any, logs: dict | None = None, **k: Any) -> None:
            if logs and "completions/mean_length" in logs:
                tokens.append(round(logs["completions/mean_length"] * n))
            if logs and "reward" in logs:
                rewards.append(float(logs["reward"]))

    timer = Timer()
    trainer = trl_trainer(args, str(model_dir), out, trl_rows(order, prompt_messages), reward, [timer])
    end_ids.update(end_token_ids(trainer.model, trainer.processing_class))
    trainer.train()
    return {
        "step_s": timer.times,
        "generated_tokens": tokens,
        "reward": rewards,
        "peak_rss_mb": peak_rss_mb(),
    }


def child(args: argparse.Namespace) -> None:
    import torch

    torch.manual_seed(0)
    model_dir, out = Path(args.model_dir), Path(args.out)
    result = run_ours(args, model_dir, out) if args.side == "ours" else run_trl(args, model_dir, out)
    print("RESULT " + json.dumps(result))


def run_side(side: str, args: argparse.Namespace, model_dir: Path, tmp: Path) -> dict[str, Any]:
    argv = [
        "--model-dir",
        str(model_dir),
        "--out",
        str(tmp / side),
        "--steps",
        str(args.steps),
        "--prompts",
        str(args.prompts),
        "--group",
        str(args.group),
        "--max-tokens",
        str(args.max_tokens),
        "--lr",
        str(args.lr),
        *(["--no-packing"] if args.no_packing else []),
    ]
    return spawn(__file__, side, argv, timeout_s=3600)


def per_step(result: dict[str, Any]) -> float:
    """Mean time of the timed steps (the first is a warm-up)."""
    timed = result["step_s"][1:]
    return sum(timed) / len(timed)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=3, help="steps per side; the first is a warm-up")
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--lr", type=float, default=3e-6)
    parser.add_argument("--model", choices=["tiny", "embedded"], default="tiny")
    parser.add_argument(
        "--repeats", type=int, default=3, help="runs per side, alternating; median and spread are reported"
    )
    parser.add_argument("--no-packing", action="store_true", help="train.packing off on our side")
    parser.add_argument("--save-runs", help="also write every run's measurements to this JSON file")
    parser.add_argument("--side", choices=["ours", "trl"], help=argparse.SUPPRESS)
    parser.add_argument("--model-dir", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        child(args)
        return
    if args.steps < 2:
        parser.error("--steps must be at least 2 (the first step is a warm-up)")
    with tempfile.TemporaryDirectory(prefix="bench-grpo-") as tmp_name:
        tmp = Path(tmp_name)
        model_dir = build_model(args.model, tmp / "model")
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


def timed_mean(values: list[float]) -> float:
    """Mean over the timed steps (the first is a warm-up)."""
    timed = values[1:] or values
    return sum(timed) / len(timed) if timed else float("nan")


def report(args: argparse.Namespace, runs: dict[str, list[dict[str, Any]]]) -> None:
    import statistics

    import torch
    import trl as trl_module

    ratios = [per_step(o) / per_step(t) for o, t in zip(runs["ours"], runs["trl"], strict=True)]
    ours, trl = median_run(runs["ours"]), median_run(runs["trl"])
    print(
        f"GRPO step on CPU ({torch.get_num_threads()} threads): model={args.model}, {args.prompts} prompts x "
        f"{args.group} rollouts, max {args.max_tokens} new tokens, {args.steps - 1} timed step(s), "
        f"{args.repeats} runs per side (median run shown), packing {'off' if args.no_packing else 'on'}; "
        f"trl {trl_module.__version__}"
    )
    print(f"{'':<30}{'cascade-envs':>14}{'TRL':>14}{'ours / TRL':>12}")
    a, b = per_step(ours), per_step(trl)
    print(f"{'time per step (s)':<30}{a:>14.2f}{b:>14.2f}{a / b:>11.2f}x")
    ma, mb = ours["peak_rss_mb"], trl["peak_rss_mb"]
    print(f"{'peak RSS (MiB)':<30}{ma:>14.0f}{mb:>14.0f}{ma / mb:>11.2f}x")
    ta, tb = timed_mean(ours["generated_tokens"]), timed_mean(trl["generated_tokens"])
    print(f"{'generated tokens per step':<30}{ta:>14.0f}{tb:>14.0f}{ta / tb:>11.2f}x")
    pa, pb = a / ta * 1e3, b / tb * 1e3
    print(f"{'time per generated token (ms)':<30}{pa:>14.1f}{pb:>14.1f}{pa / pb:>11.2f}x")
    ra = statistics.mean(r for run in runs["ours"] for r in run["reward"])
    rb = (
        statistics.mean(r for run in runs["trl"] for r in run["reward"])
        if runs["trl"][0]["reward"]
        else float("nan")
    )
    print(f"{'mean reward (all runs)':<30}{ra:>14.3f}{rb:>14.3f}")
    print(
        f"{'train tokens: padded/packed':<30}{timed_mean(ours['padded_tokens']):>14.0f}"
        f"{timed_mean(ours['packed_tokens']):>14.0f}  (per step, our side)"
    )
    print(
        f"ours / TRL step time over {len(ratios)} repeats: median {statistics.median(ratios):.2f}x, "
        f"spread {min(ratios):.2f}-{max(ratios):.2f}x ({', '.join(f'{r:.2f}' for r in ratios)})"
    )


if __name__ == "__main__":
    main()
