"""``cascade-envs solve``: a test-time scaling strategy over an env's tasks, with a summary."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from ..core import CascadeError, json_object
from .options import add_rollout_options, judge_url_option, make_policy, seed_or_none


def add_parsers(sub: Any) -> None:
    """The ``solve`` subcommand, with ``eval``'s policy, judge, sampling and timeout options."""
    p = sub.add_parser(
        "solve", help="test-time scaling over an env: best-of-N with a selector, verify-and-refine, ..."
    )
    p.add_argument("--env", required=True, metavar="ID", help="env id")
    p.add_argument("--tasks", metavar="PATH", help="task file (default: the env's own)")
    p.add_argument("--env-kwargs", metavar="JSON", help="env constructor arguments as a JSON object")
    p.add_argument("--strategy", required=True, help="best_of_n, refine, submit, or a registered one")
    p.add_argument(
        "--candidates", type=int, default=4, metavar="N", help="samples per task/round (default 4)"
    )
    p.add_argument("--rounds", type=int, default=3, metavar="R", help="round limit (default 3)")
    p.add_argument(
        "--selector",
        default="reward",
        choices=("reward", "judge", "majority"),
        help="best_of_n: the env's public check, a GenSelect judge, or a majority vote (default reward)",
    )
    p.add_argument(
        "--accept-streak", type=int, default=1, metavar="K", help="refine: stop after K accepts in a row"
    )
    p.add_argument(
        "--verifier",
        default="policy",
        metavar="policy|judge|URL",
        help="refine: who verifies: the policy itself (default), the --judge-url judge, or another "
        "policy at an http(s) URL",
    )
    p.add_argument(
        "--submissions", type=int, default=50, metavar="S", help="submit: submissions per task (default 50)"
    )
    p.add_argument("--limit", type=int, metavar="L", help="at most this many tasks")
    p.add_argument(
        "--seed", type=seed_or_none, default=0, metavar="N|none", help="request seed base (default 0)"
    )
    p.add_argument("--max-generations", type=int, metavar="G", help="model calls the whole run may make")
    p.add_argument("--max-seconds", type=float, metavar="S", help="wall-clock seconds the run may take")
    add_rollout_options(p)
    p.add_argument(
        "-o", "--output", help="results JSONL (default runs/solve-TIMESTAMP.jsonl); rerun to resume"
    )
    p.add_argument(
        "--force", action="store_true", help="start over in a results file made with other arguments"
    )
    p.set_defaults(fn=cmd_solve)


def cmd_solve(args: argparse.Namespace) -> int:
    from ..env import run_sync
    from ..judges import SERVE_JUDGE_URL, make_judge
    from ..policy import SamplingParams
    from ..registry import make
    from ..tts.base import Budget, SolveContext
    from ..tts.run import SolveJob

    if args.max_generations is not None and args.max_generations <= 0:
        raise CascadeError(
            f"--max-generations {args.max_generations} leaves no model call to make: nothing to solve"
        )
    if args.max_seconds is not None and not args.max_seconds > 0:
        raise CascadeError("--max-seconds must be positive")
    for flag, value in (
        ("--candidates", args.candidates),
        ("--rounds", args.rounds),
        ("--accept-streak", args.accept_streak),
    ):
        if value < 1:
            raise CascadeError(f"{flag} must be at least 1, got {value}")
    if args.submissions < 0:
        raise CascadeError(f"--submissions must be at least 0, got {args.submissions}")
    env_kwargs = json_object(args.env_kwargs, "--env-kwargs")
    needs_judge = (args.selector == "judge" and args.strategy == "best_of_n") or args.verifier == "judge"
    if args.verifier == "judge" and not args.judge_url:
        raise CascadeError(f"--verifier judge needs --judge-url (e.g. {SERVE_JUDGE_URL})")
    with judge_url_option(args):
        env = make(args.env, **env_kwargs, **({"tasks": args.tasks} if args.tasks else {}))
    tasks = list(env.tasks or [])[: args.limit]
    sampling = SamplingParams(args.max_tokens, args.temperature, args.top_p, seed=args.seed)
    config = {
        "env": args.env,
        "tasks": args.tasks,
        "env_kwargs": env_kwargs,
        "settings": {
            "candidates": args.candidates,
            "rounds": args.rounds,
            "selector": args.selector,
            "accept_streak": args.accept_streak,
            **({"submissions": args.submissions} if args.strategy == "submit" else {}),
        },
        "policy": args.policy if not args.policy.startswith("http") else f"{args.policy} {args.model or ''}".strip(),
        "verifier": args.verifier,
        "judge": args.judge_url if needs_judge else None,
        "sampling": {"max_tokens": sampling.max_tokens, "temperature": sampling.temperature,
                     "top_p": sampling.top_p, "seed": sampling.seed},
    }  # fmt: skip
    output = Path(args.output or f"runs/solve-{time.strftime('%Y%m%d-%H%M%S')}.jsonl")
    job = SolveJob(args.strategy, tasks, output, config).open(args.force)
    policy = judge = verifier = None
    if job.pending:  # a finished results file needs no model
        policy = make_policy(args)
        if needs_judge and args.judge_url:
            judge = make_judge(args.judge_url, timeout_s=args.request_timeout, owner="solve")
        elif needs_judge:
            print(
                "cascade-envs solve: no --judge-url: the judge selector falls back to majority",
                file=sys.stderr,
            )
        if args.verifier.startswith("http"):
            verifier = make_policy(argparse.Namespace(**{**vars(args), "policy": args.verifier}))
        elif args.verifier not in ("policy", "judge"):
            raise CascadeError(f"--verifier must be policy, judge or an http(s) URL, got {args.verifier!r}")
    budget = Budget(args.max_generations, args.max_seconds)

    async def run() -> Any:
        try:
            if policy is None:
                return job.summary()
            ctx = SolveContext(
                env, policy, args.env, args.strategy, sampling,
                judge=judge, verifier=verifier, budget=budget,
                candidates=args.candidates, rounds=args.rounds, selector=args.selector,
                accept_streak=args.accept_streak, request_timeout_s=args.request_timeout,
                options={"submissions": args.submissions},
            )  # fmt: skip
            return await job.arun(
                ctx,
                concurrency=args.concurrency,
                task_timeout_s=args.episode_timeout,
                progress=not args.no_progress,
            )
        finally:
            for closing in (policy, verifier, judge):
                if closing is not None:
                    await closing.aclose()
            await env.aclose()

    summary = run_sync(run())
    print(summary.text())
    d = summary.to_dict()
    if d["tasks"] and d["masked"] == d["tasks"]:
        print("every selected answer is masked (see the reasons above)", file=sys.stderr)
        return 1
    return 0
