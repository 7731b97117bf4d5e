"""Test-time scaling: score against the number of generations, best-of-N and refine next to pass@k.

For each env (the bundled math and code tasks, and the easy held-out instructions: the one set the
embedded 135M model passes at times) and each of its first ``--tasks`` tasks, in one run:

- best-of-N: ``--max-generations`` candidates sampled and scored by ``cascade_envs.tts``'s
  ``best_of_n`` sampler; for N in 1, 4, 16, 64 (up to that maximum) the strategy's selector
  (math: majority over the extracted answers; code: the public tests; instructions: their check,
  which the prompt states) picks among the first N, and
  the selected one's score is the point at N generations;
- plain repeated sampling at the same budget: pass@k for k = N, the unbiased estimate
  ``1 - C(n-c, k) / C(n, k)`` from the same n candidates with c correct (the oracle best-of-N);
- refine: the ``refine`` strategy, ``--rounds`` rounds (answer, verify, revise; the policy verifies
  itself); the score after round r is the env's score of the latest answer by then, plotted at the
  generations spent by then (answers and verifications), averaged over the tasks.

Prints a table and writes a plot (``--plot``, default ``bench/tts.png``).

    python bench/bench_tts.py    # SmolLM2-135M: 2 tasks/env, N <= 16, refine 5 rounds, 192 tokens
    python bench/bench_tts.py --tasks 2 --max-generations 4 --rounds 2 --max-tokens 160    # smaller
    python bench/bench_tts.py --policy http://localhost:8000/v1 --model NAME --max-generations 64
"""

from __future__ import annotations

import argparse
import asyncio
import math
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cascade_envs
from cascade_envs.policy import SamplingParams
from cascade_envs.tts import Attempt, Budget, SolveContext, get_strategy
from cascade_envs.tts.best_of_n import sample
from cascade_envs.tts.scoring import correct
from cascade_envs.tts.select import SELECTORS

ENVS = {
    "math": ("cascade/Math-v0", "majority"),
    "code": ("cascade/Code-v0", "reward"),
    "if": ("cascade/InstructionFollowing-v0", "reward"),
}
ENV_KWARGS: dict[str, dict[str, Any]] = {"if": {"tasks": "bundled:instruction_following/easy_heldout.jsonl"}}
"""``if``: the easy held-out instructions, the one set here the embedded 135M model passes at times."""
POINTS = (1, 4, 16, 64)


@dataclass
class Point:
    env: str
    method: str
    generations: float
    score: float
    tasks: int
    masked: int = 0
    """Answers behind this point that could not be scored (counted as not correct)."""


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k of ``n`` samples with ``c`` correct (``k <= n``)."""
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def context(
    env: Any, env_id: str, policy: Any, strategy: str, args: argparse.Namespace, **kw: Any
) -> SolveContext:
    sampling = SamplingParams(args.max_tokens, args.temperature, args.top_p, seed=args.seed)
    return SolveContext(
        env, policy, env_id, strategy, sampling, budget=Budget(), request_timeout_s=args.request_timeout, **kw
    )


async def best_of_n_points(name: str, env: Any, policy: Any, args: argparse.Namespace) -> list[Point]:
    env_id, selector = ENVS[name]
    ctx = context(env, env_id, policy, "best_of_n", args, selector=selector)
    tasks = list(env.tasks)[: args.tasks]
    pools = await asyncio.gather(*(sample(ctx, task, args.max_generations) for task in tasks))
    points = [n for n in POINTS if n <= args.max_generations]
    out = []
    for n in points:
        selected, oracle, masked = [], [], 0
        for task, (attempts, _) in zip(tasks, pools, strict=True):
            first = attempts[:n]
            masked += sum(a.reward is not None and a.reward.masked for a in first)
            chosen = await SELECTORS[selector](ctx, task, first)
            pick = first[chosen.index] if chosen.index is not None else None
            selected.append(float(pick is not None and correct(pick.reward)))
            c = sum(correct(a.reward) for a in attempts)
            oracle.append(pass_at_k(len(attempts), c, min(n, len(attempts))) if attempts else 0.0)
        out.append(Point(name, f"best-of-N ({selector})", n, sum(selected) / len(tasks), len(tasks), masked))
        out.append(Point(name, "pass@k (repeated sampling)", n, sum(oracle) / len(tasks), len(tasks), masked))
    report_masked(name, "best-of-N", [a for attempts, _ in pools for a in attempts])
    return out


def report_masked(name: str, what: str, attempts: list[Attempt]) -> None:
    """Say how many answers could not be scored, and why (they count as not correct)."""
    reasons = Counter(str(a.reward.error)[:120] for a in attempts if a.reward is not None and a.reward.masked)
    if reasons:
        why = "; ".join(f"{n}x {reason}" for reason, n in reasons.most_common(3))
        print(
            f"{name} {what}: {sum(reasons.values())} answer(s) masked, counted as not correct: {why}",
            file=sys.stderr,
        )


async def refine_points(name: str, env: Any, policy: Any, args: argparse.Namespace) -> list[Point]:
    env_id, _ = ENVS[name]
    tasks = list(env.tasks)[: args.tasks]
    records: list[list[Attempt]] = [[] for _ in tasks]
    contexts = [
        context(env, env_id, policy, "refine", args, rounds=args.rounds, accept_streak=args.accept_streak,
                record=records[i].append)
        for i in range(len(tasks))
    ]  # fmt: skip
    await asyncio.gather(
        *(get_strategy("refine")(ctx, task) for ctx, task in zip(contexts, tasks, strict=True))
    )
    report_masked(name, "refine", [a for attempts in records for a in attempts])
    out = []
    for r in range(1, args.rounds + 1):
        scores, spent, masked = [], [], 0
        for attempts in records:
            upto = [a for a in attempts if a.round <= r]
            answers = [a for a in upto if a.role in ("candidate", "refiner")]
            masked += sum(a.reward is not None and a.reward.masked for a in answers)
            scores.append(float(bool(answers) and correct(answers[-1].reward)))
            spent.append(len(upto))
        out.append(
            Point(
                name,
                f"refine (round {r})",
                sum(spent) / len(tasks),
                sum(scores) / len(tasks),
                len(tasks),
                masked,
            )
        )
    return out


def table(points: list[Point]) -> str:
    lines = ["| env | method | generations per task | score | masked answers |", "|---|---|---|---|---|"]
    for p in points:
        gens = f"{p.generations:g}" if p.generations == int(p.generations) else f"{p.generations:.1f}"
        lines.append(f"| {p.env} | {p.method} | {gens} | {p.score:.3f} | {p.masked} |")
    return "\n".join(lines)


def plot(points: list[Point], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    envs = list(dict.fromkeys(p.env for p in points))
    fig, axes = plt.subplots(1, len(envs), figsize=(5.5 * len(envs), 4), squeeze=False)
    for ax, name in zip(axes[0], envs, strict=True):
        mine = [p for p in points if p.env == name]
        for label, style in (("best-of-N", "o-"), ("pass@k", "s--"), ("refine", "^-")):
            series = [p for p in mine if p.method.startswith(label)]
            if series:
                ax.plot(
                    [p.generations for p in series],
                    [p.score for p in series],
                    style,
                    label=series[0].method.split(" (round")[0],
                )
        ax.set_xscale("log", base=2)
        ax.set_xlabel("generations per task")
        ax.set_ylabel("score")
        ax.set_ylim(-0.05, 1.05)
        ax.set_title(f"{name} ({mine[0].tasks} tasks)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


async def measure(policy: Any, args: argparse.Namespace) -> list[Point]:
    points: list[Point] = []
    for name in args.envs:
        env_id, _ = ENVS[name]
        kwargs: dict[str, Any] = {"timeout_s": args.verify_timeout} if name == "math" else {}
        kwargs.update(ENV_KWARGS.get(name, {}))
        env = cascade_envs.make(env_id, **kwargs, **({"thinking": False} if args.no_thinking else {}))
        try:
            started = time.perf_counter()
            points += await best_of_n_points(name, env, policy, args)
            points += await refine_points(name, env, policy, args)
            print(f"{name}: {time.perf_counter() - started:.1f} s", file=sys.stderr)
        finally:
            await env.aclose()
    return points


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--policy", default="embedded", help="embedded (SmolLM2-135M, default), hf:PATH or http(s)://HOST/v1"
    )
    p.add_argument("--model", help="the model name of an http(s) policy")
    p.add_argument("--envs", default="if,math,code", help="comma-separated: if, math, code (default all)")
    p.add_argument("--tasks", type=int, default=2, help="tasks per env (default 2)")
    p.add_argument(
        "--max-generations", type=int, default=16, help="largest N of best-of-N (default 16; up to 64)"
    )
    p.add_argument("--rounds", type=int, default=5, help="refine rounds (default 5)")
    p.add_argument(
        "--accept-streak", type=int, default=2, help="refine: stop after K accepts in a row (default 2)"
    )
    p.add_argument("--max-tokens", type=int, default=192)
    p.add_argument("--temperature", type=float, default=0.8)
    p.add_argument("--top-p", type=float, default=0.95)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--no-thinking", action="store_true", help="answer in non-thinking mode (empty think block)"
    )
    p.add_argument("--request-timeout", type=float, default=600.0, help="seconds per model call")
    p.add_argument(
        "--verify-timeout",
        type=float,
        default=60.0,
        help="math: seconds per answer check (the env's default, 10 s, masks checks on a crowded machine)",
    )
    p.add_argument(
        "--plot", type=Path, default=Path(__file__).with_name("tts.png"), help="default bench/tts.png"
    )
    args = p.parse_args(argv)
    args.envs = [e.strip() for e in args.envs.split(",") if e.strip()]
    unknown = [e for e in args.envs if e not in ENVS]
    if unknown or not args.envs:
        p.error(f"--envs: unknown {', '.join(unknown) or '(none given)'}; choose from {', '.join(ENVS)}")
    for flag in ("tasks", "max_generations", "rounds", "accept_streak", "max_tokens"):
        if getattr(args, flag) < 1:
            p.error(f"--{flag.replace('_', '-')} must be at least 1")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    from cascade_envs.policies import make_policy

    started = time.perf_counter()
    policy = make_policy(args.policy, **({"model": args.model} if args.policy.startswith("http") else {}))

    async def run() -> list[Point]:
        try:
            return await measure(policy, args)
        finally:
            await policy.aclose()

    points = asyncio.run(run())
    elapsed = time.perf_counter() - started
    title = (
        f"{args.policy}: {args.tasks} tasks/env, N <= {args.max_generations}, refine {args.rounds} rounds, "
        f"{args.max_tokens} tokens, T={args.temperature} ({elapsed / 60:.1f} min)"
    )
    print(table(points))
    print(title)
    plot(points, args.plot, title)
    print(f"plot: {args.plot}")


if __name__ == "__main__":
    main()
