"""``filter``: difficulty filtering of an env's prompts by a policy's pass rate."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ..core import json_object
from .options import add_rollout_options, judge_url_option, make_policy


def add_parsers(sub: Any) -> None:
    """Add ``filter``."""
    p = sub.add_parser(
        "filter", help="difficulty filtering: drop prompts a policy solves k/k, keep a share of 0/k"
    )
    p.add_argument("--env", required=True, metavar="ID", help="env id whose rows --tasks holds")
    p.add_argument(
        "--tasks", required=True, metavar="PATH", help="task file (JSONL/Parquet, or bundled:DOMAIN/FILE)"
    )
    p.add_argument("--env-kwargs", metavar="JSON", help="env constructor arguments as a JSON object")
    p.add_argument("-k", type=int, default=8, help="rollouts per prompt (default %(default)s)")
    p.add_argument(
        "--keep-unsolved",
        type=float,
        default=1.0,
        metavar="FRACTION",
        help="seeded share of 0/k prompts kept (default %(default)s: all; the SWE curation uses 0.1)",
    )
    p.add_argument(
        "--solved-threshold",
        type=float,
        default=1.0,
        metavar="R",
        help="a rollout is solved when its reward is >= R (default %(default)s)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the keep-unsolved draw (default %(default)s)")
    add_rollout_options(p)
    p.add_argument(
        "-o",
        "--output",
        required=True,
        metavar="OUT_DIR",
        help="output folder (outcomes.jsonl, kept.jsonl, histogram.txt, ...); rerun to resume",
    )
    p.add_argument("--force", action="store_true", help="start over in an OUT_DIR made with other arguments")
    p.set_defaults(fn=cmd_filter)


def cmd_filter(args: argparse.Namespace) -> int:
    from ..env import run_sync
    from ..filtering import FilterJob, FilterSettings, format_histogram
    from ..policy import SamplingParams

    env_kwargs = json_object(args.env_kwargs, "--env-kwargs")
    settings = FilterSettings(args.k, args.keep_unsolved, args.solved_threshold, args.seed)
    policy_id = (
        args.policy
        if not args.policy.startswith("http")
        else f"http model {args.model or '(server default)'}"
    )
    job = FilterJob(
        args.env,
        args.tasks,
        args.output,
        settings,
        env_kwargs=env_kwargs,
        policy_id=policy_id,
        sampling=SamplingParams(args.max_tokens, args.temperature, args.top_p),
    ).open(args.force)
    policy: Any = make_policy(args) if job.pending else None  # a finished folder needs no model

    async def run() -> Any:
        try:
            return await job.arun(
                policy,
                concurrency=args.concurrency,
                episode_timeout_s=args.episode_timeout,
                progress=not args.no_progress,
            )
        finally:
            if policy is not None:
                await policy.aclose()

    with judge_url_option(args):  # the env is made in job.arun
        summary = run_sync(run())
    print(format_histogram(summary.histogram))
    print(json.dumps(summary.to_dict(), indent=2))
    if not summary.complete:
        print(
            f"{summary.counts['incomplete']} prompt(s) incomplete (rollouts not scored; see "
            f"{summary.out_dir / 'outcomes.jsonl'}): rerun the same command to retry them",
            file=sys.stderr,
        )
        return 1
    return 0
