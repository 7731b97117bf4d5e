"""``eval``: play environments with a policy and print per-env rewards."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from ..core import CascadeError
from .options import add_rollout_options, judge_url_option, make_policy, parse_weights, seed_or_none


def add_parsers(sub: Any) -> None:
    """Add ``eval``."""
    p = sub.add_parser("eval", help="play environments with a policy and print per-env rewards")
    p.add_argument(
        "--env", action="append", metavar="ID", help="env id (repeatable); default: every CPU domain"
    )
    p.add_argument(
        "--mix", metavar="ID=W,... | FILE.yaml", help="weighted env mix (then --num-tasks samples)"
    )
    p.add_argument("--tasks", metavar="PATH", help="task file (JSONL/Parquet) for the single --env")
    p.add_argument("-n", "--num-tasks", type=int, help="sample this many tasks from the mix")
    p.add_argument("--limit", type=int, help="at most this many tasks per env (without --num-tasks)")
    p.add_argument("-g", "--group-size", type=int, default=1, help="samples per task (default 1)")
    p.add_argument(
        "--seed",
        type=seed_or_none,
        default=0,
        metavar="N|none",
        help="seeds the task draw and every request (seed + index; default %(default)s); 'none' sends "
        "no seed, so an HTTP server samples from its own RNG (vLLM on CPU needs this under load)",
    )
    add_rollout_options(p)
    p.add_argument(
        "--ray",
        metavar="ADDRESS",
        help="play and score the envs on Ray actors: 'auto' joins a "
        "running cluster, 'local' starts one (default: all in this process)",
    )
    p.add_argument(
        "--ray-actors", type=int, default=0, metavar="N", help="Ray actors per env (default: one per CPU)"
    )
    p.add_argument("-o", "--output", help="results JSONL (default runs/eval-TIMESTAMP.jsonl)")
    p.set_defaults(fn=cmd_eval)


def cmd_eval(args: argparse.Namespace) -> int:
    from ..envs import DEFAULT_EVAL_ENVS
    from ..mix import EnvMix, load_mix_file, parse_mix
    from ..rollout import RolloutRunner, SamplingParams
    from ..rollout.metrics import MixMetrics

    env_kwargs: dict[str, dict[str, Any]] = {}
    if args.mix and Path(args.mix).suffix in (".yaml", ".yml"):
        weights, env_kwargs = load_mix_file(args.mix)
    elif args.mix:
        weights, env_kwargs = parse_mix(parse_weights(args.mix), source="--mix:")
    else:
        ids = args.env or list(DEFAULT_EVAL_ENVS)
        weights = {env_id: 1.0 / len(ids) for env_id in ids}
    if args.tasks:
        if len(weights) != 1:
            raise CascadeError("--tasks needs exactly one --env")
        env_kwargs.setdefault(next(iter(weights)), {})["tasks"] = args.tasks
    with judge_url_option(args):
        mix = EnvMix(weights, seed=args.seed or 0, env_kwargs=env_kwargs)
    if args.ray:
        from ..distributed import attach_ray

        attach_ray(mix, args.ray, env_actors=args.ray_actors)
    items = mix.sample(args.num_tasks) if args.num_tasks else mix.all_tasks(limit=args.limit)
    output = Path(args.output or f"runs/eval-{time.strftime('%Y%m%d-%H%M%S')}.jsonl")
    if output.exists():
        output.unlink()
    policy = make_policy(args)
    sampling = SamplingParams(args.max_tokens, args.temperature, args.top_p, seed=args.seed)
    runner = RolloutRunner(
        policy,
        sampling=sampling,
        group_size=args.group_size,
        concurrency=args.concurrency,
        envs=mix.envs,
        results_path=output,
        progress=not args.no_progress,
        episode_timeout_s=args.episode_timeout,
    )
    from ..env import run_sync

    async def run() -> Any:
        try:
            return await runner.arun(items)
        finally:
            await mix.envs.aclose()
            await policy.aclose()

    started = time.perf_counter()
    groups = run_sync(run())
    elapsed = time.perf_counter() - started
    metrics = MixMetrics().add_groups(groups)
    print(metrics.table())
    total = metrics.total()
    print(f"\n{total.episodes} episodes in {elapsed:.1f} s; results: {output}")
    stats = getattr(policy, "stats", None)
    if stats and (stats.get("retries") or stats.get("failures")):
        print(
            f"policy requests: {stats.get('requests', 0)}, retried {stats.get('retries', 0)}, "
            f"failed {stats.get('failures', 0)}"
        )
    if total.errors:
        print(
            f"{total.errors} episode(s) failed; first errors: {'; '.join(e for s in metrics.stats.values() for e in s.error_examples)[:600]}"
        )
    if total.episodes and total.errors == total.episodes:
        print("every episode failed", file=sys.stderr)
        return 1
    return 0
