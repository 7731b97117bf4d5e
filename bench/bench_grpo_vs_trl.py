"""One GRPO step, this trainer vs. TRL's Trainer, on CPU: time per step and peak memory.

Both sides train the same model (a small randomly initialised Llama with SmolLM2's tokenizer by
default, or ``--model embedded`` for SmolLM2-135M-Instruct itself) on the same prompts, with the
same group size, completion length, learning rate and reward, strictly on-policy: TRL is set to
``loss_type="dapo"`` (token-level normalisation), ``beta=0`` (no KL / reference model) and
``num_iterations=1`` (one optimizer step per generation batch), which is this trainer's GRPO.
Each side runs in its own subprocess (so peak RSS is its own), ``--repeats`` times, alternating
with the other side; the fastest run of each side counts. The first step of a run is a warm-up and
is not timed. A step covers generation, reward and the optimizer update on both sides. Both sides
train on the same prompts in the same order (the draws of this trainer's seeded mix; no
oversampling here, so each step plays exactly ``--prompts`` prompts), stop on the same end
tokens, and score a sample cut at the length cap with the env's truncation reward (0); time per
generated token is reported next to time per step, since the two sides sample different lengths.

    python bench/bench_grpo_vs_trl.py [--steps 3] [--prompts 4] [--group 4] [--max-tokens 32] [--model tiny|embedded] [--repeats 2]
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
    trainer = Trainer(config)
    times, tokens = [], []
    for _ in range(args.steps):
        start = time.perf_counter()
        metrics = trainer.train_step()
        times.append(time.perf_counter() - start)
        tokens.append(metrics["throughput/generated_tokens"])
    trainer.close()
    return {"step_s": times, "generated_tokens": tokens, "peak_rss_mb": peak_rss_mb()}


def run_trl(args: argparse.Namespace, model_dir: Path, out: Path) -> dict[str, Any]:
    from transformers import TrainerCallback

    from cascade_envs.data import prompt_messages
    from cascade_envs.policies.decoding import end_token_ids

    mix = register_bench_env()
    order = prompt_order(mix, args.prompts * args.steps)  # the prompts ours draws, in its order
    env = cascade_envs.make("bench/Reward-v0")
    n = args.prompts * args.group
    tokens: list[int] = []
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

    timer = Timer()
    trainer = trl_trainer(args, str(model_dir), out, trl_rows(order, prompt_messages), reward, [timer])
    end_ids.update(end_token_ids(trainer.model, trainer.processing_class))
    trainer.train()
    return {"step_s": timer.times, "generated_tokens": tokens, "peak_rss_mb": peak_rss_mb()}


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
        "--repeats", type=int, default=2, help="runs per side, alternating; the fastest counts"
    )
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
        for _ in range(args.repeats):  # alternate the sides, so load from other processes hits both
            for side in runs:
                runs[side].append(run_side(side, args, model_dir, tmp))
        ours, trl = (min(runs[side], key=per_step) for side in ("ours", "trl"))
    import torch
    import trl as trl_module

    print(
        f"GRPO step on CPU ({torch.get_num_threads()} threads): model={args.model}, {args.prompts} prompts x "
        f"{args.group} rollouts, max {args.max_tokens} new tokens, {args.steps - 1} timed step(s), best of {args.repeats} runs per side; trl {trl_module.__version__}"
    )
    print(f"{'':<28}{'cascade-envs':>14}{'TRL':>14}{'TRL / ours':>12}")
    a, b = per_step(ours), per_step(trl)
    print(f"{'time per step (s)':<28}{a:>14.2f}{b:>14.2f}{b / a:>11.2f}x")
    ma, mb = ours["peak_rss_mb"], trl["peak_rss_mb"]
    print(f"{'peak RSS (MiB)':<28}{ma:>14.0f}{mb:>14.0f}{mb / ma:>11.2f}x")
    ta = sum(ours["generated_tokens"][1:]) / max(len(ours["generated_tokens"]) - 1, 1)
    tb = (
        sum(trl["generated_tokens"][1:]) / max(len(trl["generated_tokens"]) - 1, 1)
        if trl["generated_tokens"]
        else float("nan")
    )
    print(f"{'generated tokens per step':<28}{ta:>14.0f}{tb:>14.0f}{tb / ta:>11.2f}x")
    pa, pb = a / ta * 1e3, b / tb * 1e3
    print(f"{'time per generated token (ms)':<28}{pa:>14.1f}{pb:>14.1f}{pb / pa:>11.2f}x")


if __name__ == "__main__":
    main()
