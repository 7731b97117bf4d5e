"""``rescore``: recompute the rewards of stored episodes, without inference."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..core import json_object


def add_parsers(sub: Any) -> None:
    """Add ``rescore``."""
    p = sub.add_parser(
        "rescore",
        help="recompute the rewards of stored episodes (eval/solve/filter results, NeMo Gym rollouts) "
        "with the current verifiers and judges, without inference",
    )
    p.add_argument(
        "results", metavar="RESULTS", help="a results JSONL, a filter output folder, or NeMo Gym rollouts"
    )
    p.add_argument(
        "-o",
        "--out",
        metavar="PATH",
        help="output (default RESULTS.rescored.jsonl, or DIR-rescored for a filter folder); rerun to resume",
    )
    p.add_argument(
        "--in-place", action="store_true", help="replace RESULTS with the rescored file at the end"
    )
    p.add_argument(
        "--masked-only", action="store_true", help="rescore only masked rows (e.g. after a judge outage)"
    )
    p.add_argument(
        "--env", metavar="ID", help="score every row with this env (NeMo Gym rows name none: required there)"
    )
    p.add_argument("--env-kwargs", metavar="JSON", help="env constructor arguments over the recorded ones")
    p.add_argument(
        "--tasks",
        metavar="PATH",
        help="task rows for files that do not record them (old eval results, NeMo Gym rollouts without "
        "their task fields: matched by _ng_task_index, else by prompt)",
    )
    p.add_argument(
        "--judge-url",
        metavar="URL[,URL...]",
        help="judge endpoint(s) of LLM-judged envs (default: recorded, else $CASCADE_ENVS_JUDGE_URL)",
    )
    p.add_argument("--judge-timeout", type=float, metavar="S", help="deadline of one judge request attempt")
    p.add_argument(
        "--concurrency", type=int, default=16, help="rows (groups) scored at once (default %(default)s)"
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=600.0,
        metavar="S",
        help="budget of one row's (group's) rescoring; past it the row is masked (default %(default)s)",
    )
    p.add_argument("--force", action="store_true", help="start over in an --out holding another file's rows")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.set_defaults(fn=cmd_rescore)


def cmd_rescore(args: argparse.Namespace) -> int:
    from ..rescore import rescore

    summary = rescore(
        args.results,
        args.out,
        in_place=args.in_place,
        masked_only=args.masked_only,
        env_id=args.env,
        env_kwargs=json_object(args.env_kwargs, "--env-kwargs"),
        tasks=args.tasks,
        judge_url=args.judge_url,
        judge_timeout_s=args.judge_timeout,
        concurrency=args.concurrency,
        timeout_s=args.timeout,
        force=args.force,
        progress=not args.no_progress,
    )
    print(summary.table())
    failed = summary.total()["failed"]
    if failed:
        print(
            f"{failed} row(s) could not be rescored (masked in the output; see rescore.error)",
            file=sys.stderr,
        )
    return 1 if failed else 0
