"""Learning on a real env, this trainer vs. TRL's GRPOTrainer: time-to-reward and held-out before/after.

Both sides train the embedded SmolLM2-135M-Instruct on the bundled easy instruction-following rows
(``envs/instruction_following/data/easy.jsonl``), with the same prompts in the same order, group
size, generation length, temperature, learning rate, dtype and torch threads, strictly on-policy
(TRL: ``loss_type="dapo"``, ``beta=0``, ``num_iterations=1``; ours: no dynamic filtering, one
rollout round). The reward on both sides is ``cascade/InstructionFollowing-v0``'s, through
``Env.ascore_responses`` with the sample as a ``Completion``, so a sample cut at the length cap
gets the env's truncation reward (0) on both sides.

Reported per side: time-to-reward (training wall-clock until the mean reward of the last ``k``
steps reaches ``--threshold``; model loading and held-out scoring not counted), the held-out score
before and after (greedy answers to ``easy_heldout.jsonl``, questions never trained on), and time
per generated token. Each side runs in its own subprocess for at most ``--max-minutes`` of training.

    python bench/bench_learning_vs_trl.py [--max-minutes 5] [--steps 20] [--threads 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ENV_ID = "cascade/InstructionFollowing-v0"
DATA = Path(__file__).resolve().parents[1] / "envs" / "instruction_following" / "data"


# -- shared by both sides (and by bench_grpo_vs_trl.py) -------------------------------------------------


def training_config(args: argparse.Namespace, model_dir: str, out: Path, mix_envs: dict[str, Any]) -> Any:
    """This trainer's config for a strictly on-policy run: P prompts x G samples, no filtering; float32
    weights on ``args.device`` (default cpu; on a GPU with bf16 autocast and activation checkpointing,
    the trainer's defaults there)."""
    from cascade_envs.trainer.checks import config_from_dict

    batch = args.prompts * args.group
    return config_from_dict(
        {
            "model": {"path": model_dir, "dtype": "float32", "device": getattr(args, "device", "cpu")},
            "mix": {"envs": mix_envs},
            "rollout": {
                "group_size": args.group,
                "prompts_per_step": args.prompts,
                "max_tokens": args.max_tokens,
                "temperature": 1.0,
                "top_p": 1.0,
                "dynamic_filtering": False,
                "max_rounds": 1,
                "engine_kwargs": {"max_batch_size": batch},
            },
            "optim": {"lr": args.lr, "micro_batch_size": batch},
            "train": {
                "steps": args.steps,
                "seed": 0,
                "output_dir": str(out),
                "save_every": 10**6,
                "tensorboard": False,
                "progress": False,
                "plot": False,
                "resume": False,
            },
        }
    )


def prompt_order(mix_envs: dict[str, Any], n: int) -> list[tuple[str, dict]]:
    """The first ``n`` ``(env_id, row)`` draws this trainer makes with ``train.seed = 0``."""
    from cascade_envs.mix import EnvMix, parse_mix

    weights, kwargs = parse_mix(mix_envs, source="bench")
    mix = EnvMix(weights, seed=0, env_kwargs=kwargs)
    try:
        return [(env_id, loaded.row) for env_id, loaded in mix.sample(n)]
    finally:
        asyncio.run(mix.envs.aclose())


def score_completions(env: Any, tasks: Sequence[dict], completions: Sequence[Any]) -> list[float]:
    """Score each completion against its task with the env (one event loop for the whole batch)."""

    async def score() -> list[float]:
        rewards = await asyncio.gather(
            *(env.ascore_responses(t, [c]) for t, c in zip(tasks, completions, strict=True))
        )
        return [float(r[0].value) if not r[0].masked else float("nan") for r in rewards]

    return asyncio.run(score())


def trl_trainer(
    args: argparse.Namespace, model_dir: str, out: Path, rows: list[dict], reward: Callable, callbacks: list
) -> Any:
    """TRL's GRPOTrainer with the same settings as ``training_config`` (rows already in draw order); on a
    GPU with bf16 autocast (mixed precision); activation checkpointing is TRL's default (on)."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from cascade_envs.policies.decoding import end_token_ids

    batch = args.prompts * args.group
    gpu = getattr(args, "device", "cpu") == "cuda"
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype="float32")
    tokenizer = AutoTokenizer.from_pretrained(model_dir, padding_side="left")
    config = GRPOConfig(
        output_dir=str(out),
        per_device_train_batch_size=batch,
        gradient_accumulation_steps=1,
        num_generations=args.group,
        max_completion_length=args.max_tokens,
        loss_type="dapo",
        beta=0.0,
        num_iterations=1,
        learning_rate=args.lr,
        temperature=1.0,
        top_p=1.0,
        max_steps=args.steps,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        use_cpu=not gpu,
        bf16=gpu,
        fp16=False,
        seed=0,
        shuffle_dataset=False,
        max_grad_norm=1.0,
        weight_decay=0.0,
        lr_scheduler_type="constant",
        warmup_steps=0,
        dataloader_num_workers=0,
        # the same end tokens as ours (TRL alone stops on the tokenizer's EOS only)
        generation_kwargs={"eos_token_id": sorted(end_token_ids(model, tokenizer))},
    )
    return GRPOTrainer(
        model=model,
        reward_funcs=reward,
        args=config,
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
        callbacks=callbacks,
    )


def trl_rows(order: list[tuple[str, dict]], messages_of: Callable[[dict], list]) -> list[dict]:
    """TRL dataset rows in ``order``: the chat prompt plus the task as JSON for the reward function."""
    return [{"prompt": messages_of(task), "task_json": json.dumps(task)} for _, task in order]


def trl_completion(text: str, ids: Sequence[int], end_ids: set[int], max_tokens: int) -> Any:
    """A TRL sample as a ``Completion``: ``length`` when it hit the cap without an end token."""
    from cascade_envs.core import Completion

    cut = len(ids) >= max_tokens and not (ids and ids[-1] in end_ids)
    return Completion(text, finish_reason="length" if cut else "stop", token_ids=list(ids))


class SideFailed(SystemExit):
    """A side that failed or gave no result. Uncaught, it ends the benchmark with ``message`` (exit
    status 1, as ``sys.exit(message)``); ``reason`` is a one-line summary for a caller that goes on."""

    def __init__(self, message: str, reason: str):
        super().__init__(message)
        self.reason = reason


def spawn(
    script: str,
    side: str,
    argv: list[str],
    timeout_s: float,
    *,
    python: str = sys.executable,
    env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Run one side in a fresh subprocess of ``python`` (extra ``env`` on top of this process's);
    its last ``RESULT {json}`` line, or ``SideFailed``."""
    env = {
        **os.environ,
        "TRANSFORMERS_VERBOSITY": "error",
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        **(env or {}),
    }
    try:
        proc = subprocess.run(
            [python, script, "--side", side, *argv],
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout_s,
        )
    except subprocess.TimeoutExpired:
        reason = f"no result within {timeout_s:.0f} s"
        raise SideFailed(f"{side}: {reason}", reason) from None
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode or not lines:
        errors = [line for line in proc.stderr.splitlines() if line.strip()]
        reason = f"failed (exit {proc.returncode}): {errors[-1] if errors else 'no output'}"[:400]
        raise SideFailed(f"{side} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}", reason)
    result: dict[str, Any] = json.loads(lines[-1].removeprefix("RESULT "))
    return result


# -- this benchmark ---------------------------------------------------------------------------------


def mix_envs(args: argparse.Namespace) -> dict[str, Any]:
    return {ENV_ID: {"weight": 1.0, "kwargs": {"tasks": str(args.rows)}}}


def heldout_score(model: Any, tokenizer: Any, args: argparse.Namespace) -> float:
    """Mean env reward of greedy answers to the held-out rows."""
    import cascade_envs
    from cascade_envs.data import prompt_messages
    from cascade_envs.policies.hf import HFPolicy
    from cascade_envs.policy import SamplingParams

    env = cascade_envs.make(ENV_ID, tasks=str(args.heldout))
    try:
        tasks = [loaded.row for loaded in env.tasks]
        policy = HFPolicy(model, tokenizer, device="cpu", max_batch_size=len(tasks))
        outs = policy.generate(
            [prompt_messages(t) for t in tasks], SamplingParams(max_tokens=args.max_tokens, temperature=0)
        )
        scores = score_completions(env, tasks, outs)
    finally:
        asyncio.run(env.aclose())
    return sum(scores) / len(scores)


def run_ours(args: argparse.Namespace, model_dir: str, out: Path) -> dict[str, Any]:
    from cascade_envs.trainer.loop import Trainer

    trainer = Trainer(training_config(args, model_dir, out, mix_envs(args)))
    curve: list[tuple[float, float, float]] = []  # (elapsed s, mean reward, generated tokens)
    start = time.perf_counter()
    for _ in range(args.steps):
        metrics = trainer.train_step()
        curve.append(
            (
                time.perf_counter() - start,
                metrics.get("reward/mean", float("nan")),
                metrics["throughput/generated_tokens"],
            )
        )
        if curve[-1][0] > args.max_minutes * 60:
            break
    after = heldout_score(trainer.model, trainer.tokenizer, args)
    trainer.close()
    return {"curve": curve, "heldout_after": after}


def run_trl(args: argparse.Namespace, model_dir: str, out: Path) -> dict[str, Any]:
    from transformers import TrainerCallback

    import cascade_envs
    from cascade_envs.data import prompt_messages
    from cascade_envs.policies.decoding import end_token_ids

    order = prompt_order(mix_envs(args), args.prompts * args.steps)
    env = cascade_envs.make(ENV_ID, tasks=str(args.rows))
    end_ids: set[int] = set()

    def reward(completions: list, completion_ids: list, task_json: list, **_: Any) -> list[float]:
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        samples = [
            trl_completion(t, ids, end_ids, args.max_tokens)
            for t, ids in zip(texts, completion_ids, strict=True)
        ]
        return score_completions(env, [json.loads(t) for t in task_json], samples)

    curve: list[tuple[float, float, float]] = []
    n = args.prompts * args.group

    class Clock(TrainerCallback):
        start = 0.0

        def on_train_begin(self, *a: Any, **k: Any) -> None:
            self.start = time.perf_counter()

        def on_log(self, _args: Any, _state: Any, control: Any, logs: dict | None = None, **k: Any) -> None:
            if logs and "reward" in logs:
                elapsed = time.perf_counter() - self.start
                curve.append((elapsed, logs["reward"], logs["completions/mean_length"] * n))
                if elapsed > args.max_minutes * 60:
                    control.should_training_stop = True

    trainer = trl_trainer(args, model_dir, out, trl_rows(order, prompt_messages), reward, [Clock()])
    end_ids.update(end_token_ids(trainer.model, trainer.processing_class))
    trainer.train()
    after = heldout_score(trainer.model, trainer.processing_class, args)
    asyncio.run(env.aclose())
    return {"curve": curve, "heldout_after": after}


def time_to_reward(curve: list, k: int, threshold: float) -> float | None:
    """Elapsed seconds at the first step where the mean reward of the last ``k`` steps >= threshold."""
    for i in range(k - 1, len(curve)):
        if sum(r for _, r, _ in curve[i - k + 1 : i + 1]) / k >= threshold:
            return curve[i][0]
    return None


def summary(result: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    curve = result["curve"]
    tokens = sum(t for _, _, t in curve)
    return {
        "ttr": time_to_reward(curve, args.k, args.threshold),
        "steps": len(curve),
        "train_s": curve[-1][0] if curve else float("nan"),
        "s_per_token": curve[-1][0] / tokens if tokens else float("nan"),
        "first": curve[0][1] if curve else float("nan"),
        "last_k": sum(r for _, r, _ in curve[-args.k :]) / max(len(curve[-args.k :]), 1),
        "after": result["heldout_after"],
    }


def report(ours: dict[str, Any], trl: dict[str, Any], before: float, args: argparse.Namespace) -> None:
    import torch
    import trl as trl_module

    print(
        f"GRPO learning on {ENV_ID} ({Path(args.rows).name}, held-out {Path(args.heldout).name}), SmolLM2-135M-Instruct "
        f"float32, {torch.get_num_threads()} threads, {args.prompts} prompts x {args.group}, max {args.max_tokens} tokens, "
        f"lr {args.lr}, <= {args.steps} steps / {args.max_minutes} min per side; trl {trl_module.__version__}"
    )
    print(f"{'':<40}{'cascade-envs':>14}{'TRL':>14}{'TRL / ours':>12}")

    def row(name: str, a: float | None, b: float | None, fmt: str, ratio: bool = True) -> None:
        cell = lambda v: f"{'not reached':>14}" if v is None else f"{v:>14{fmt}}"  # noqa: E731
        r = f"{b / a:>11.2f}x" if ratio and a and b is not None else f"{'':>12}"
        print(f"{name:<40}{cell(a)}{cell(b)}{r}")

    row(f"time to reward (last {args.k} >= {args.threshold}) s", ours["ttr"], trl["ttr"], ".1f")
    row("steps run", ours["steps"], trl["steps"], "d", ratio=False)
    row("training time (s)", ours["train_s"], trl["train_s"], ".1f")
    row("time per generated token (ms)", ours["s_per_token"] * 1e3, trl["s_per_token"] * 1e3, ".1f")
    row("train reward, first step", ours["first"], trl["first"], ".3f", ratio=False)
    row(f"train reward, last {args.k} steps", ours["last_k"], trl["last_k"], ".3f", ratio=False)
    row("held-out score before (base model)", before, before, ".3f", ratio=False)
    row("held-out score after", ours["after"], trl["after"], ".3f", ratio=False)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", default=str(DATA / "easy.jsonl"))
    parser.add_argument("--heldout", default=str(DATA / "easy_heldout.jsonl"))
    parser.add_argument("--steps", type=int, default=20, help="at most this many steps per side")
    parser.add_argument("--max-minutes", type=float, default=5.0, help="training time limit per side")
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=24)
    parser.add_argument("--lr", type=float, default=2e-5)
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads on both sides")
    parser.add_argument("--k", type=int, default=3, help="steps in the time-to-reward moving mean")
    parser.add_argument("--threshold", type=float, default=0.7)
    parser.add_argument("--side", choices=["ours", "trl"], help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    from cascade_envs.policies.embedded import embedded_model_path

    model_dir = str(embedded_model_path())
    if args.side:
        torch.manual_seed(0)
        result = (run_ours if args.side == "ours" else run_trl)(args, model_dir, Path(args.out))
        print("RESULT " + json.dumps(result))
        return
    from transformers import AutoModelForCausalLM, AutoTokenizer

    before = heldout_score(
        AutoModelForCausalLM.from_pretrained(model_dir, dtype="float32"),
        AutoTokenizer.from_pretrained(model_dir),
        args,
    )
    passthrough = sys.argv[1:]
    limit = args.max_minutes * 60 * 3 + 600  # training, then loading and held-out scoring
    with tempfile.TemporaryDirectory(prefix="bench-learning-") as tmp:
        results = {
            side: spawn(__file__, side, [*passthrough, "--out", f"{tmp}/{side}"], limit)
            for side in ("ours", "trl")
        }
    report(summary(results["ours"], args), summary(results["trl"], args), before, args)


if __name__ == "__main__":
    main()
