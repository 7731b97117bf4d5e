"""The ``cascade-envs`` command: list, info, eval, train, serve, export, serve-sandbox, serve-judge, filter, rescore, build-image.

Every failure the user can fix is one line on stderr and a non-zero exit code; set
``CASCADE_ENVS_DEBUG=1`` for a traceback.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .core import CascadeError, json_object
from .defaults import DEFAULT_CONCURRENCY, DEFAULT_MAX_TOKENS, DEFAULT_TEMPERATURE, DEFAULT_TOP_P

SANDBOX_SERVICE_MODULE = "cascade_envs.envs.code.service"
"""The code env's verification service, run by ``serve-sandbox`` (imported by name, when used)."""
SWE_IMAGES_MODULE = "cascade_envs.envs.swe.images"
"""The SWE env's per-instance images, built by ``build-image swe`` (imported by name, when used)."""
DOCS_PAGE = "docs/index.md"
"""The documentation page ``cascade-envs --help`` ends with (a path in the repository: no site is hosted)."""
COMMAND_DOCS = {
    "list": "docs/envs/index.md",
    "info": "docs/envs/index.md",
    "eval": "docs/evaluate.md",
    "train": "docs/training/index.md",
    "serve": "docs/integrations/index.md",
    "export": "docs/integrations/index.md",
    "serve-sandbox": "docs/security.md",
    "serve-judge": "docs/envs/judges.md",
    "filter": "docs/training/filtering.md",
    "rescore": "docs/evaluate.md",
    "solve": "docs/tts.md",
    "build-image": "docs/security.md#sandboxes-and-the-code-verifier",
}
"""The page each subcommand's ``--help`` ends with (``docs: PATH``); every subcommand needs one
(``tests/test_docs.py`` checks that each page and anchor exists)."""


def _parse_weights(text: str) -> dict[str, float]:
    """``"ID=W,ID2=W2"`` (a bare ``ID`` weighs 1) as a mapping for ``parse_mix``."""
    weights: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        env_id, sep, weight = part.partition("=")
        try:
            weights[env_id.strip()] = float(weight) if sep else 1.0
        except ValueError:
            raise CascadeError(f"bad weight in --mix {part!r}: expected ID=NUMBER") from None
    return weights


def _seed(text: str) -> int | None:
    """``--seed``: an int, or ``none`` for requests that carry no seed (the server samples freely)."""
    if text.strip().lower() == "none":
        return None
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer or 'none', got {text!r}") from None


def _make_policy(args: argparse.Namespace) -> Any:
    """The policy of ``--policy`` (with ``--model`` and ``--request-timeout`` for an HTTP one)."""
    from .rollout import make_policy

    if args.policy.startswith("http"):
        return make_policy(args.policy, model=args.model, timeout_s=args.request_timeout)
    return make_policy(args.policy)


def cmd_list(args: argparse.Namespace) -> int:
    from .plugins.manager import failures
    from .registry import env_specs, judges, sandboxes

    rows = [("environment", s) for s in env_specs().values()]
    rows += [("sandbox", s) for _, s in sandboxes.items()] + [("judge", s) for _, s in judges.items()]
    if args.json:
        print(
            json.dumps(
                [
                    {
                        "kind": k,
                        "id": s.id,
                        "entry_point": s.entry_point,
                        "plugin": s.plugin,
                        "distribution": s.distribution,
                        "version": s.version,
                    }
                    for k, s in rows
                ],
                indent=2,
            )
        )
        return 0
    width = max([len(s.id) for _, s in rows] + [10])
    plugin_width = max([len(s.plugin) for _, s in rows] + [6])
    print(f"{'id':<{width}}  {'kind':<11}  {'plugin':<{plugin_width}}  distribution")
    for kind, s in rows:
        print(
            f"{s.id:<{width}}  {kind:<11}  {s.plugin:<{plugin_width}}  {s.distribution} {s.version}".rstrip()
        )
    for failure in failures():
        print(f"BROKEN: {failure}")
    return 0


def cmd_info(args: argparse.Namespace) -> int:
    from .registry import spec

    s = spec(args.env_id)
    cls = s.load()
    print(f"id:           {s.id}")
    print(f"entry point:  {s.entry_point}")
    print(f"plugin:       {s.plugin} ({s.distribution} {s.version})")
    print(f"defaults:     {json.dumps(s.kwargs, default=str)}")
    doc = (cls.__doc__ or "").strip().splitlines()
    print(f"about:        {doc[0] if doc else '-'}")
    env = s.make()
    try:
        print(f"max turns:    {getattr(env, 'max_turns', '-')}")
        print(f"thinking:     {getattr(env, 'thinking', '-')}")
        tasks = getattr(env, "tasks", None)
        print(f"tasks:        {len(tasks) if tasks is not None else 'none (pass tasks=)'}")
    finally:
        env.close()
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from .envs import DEFAULT_EVAL_ENVS
    from .judges import JUDGE_URL_ENV, SERVE_JUDGE_URL, JudgeUnavailable
    from .mix import EnvMix, load_mix_file, parse_mix
    from .rollout import RolloutRunner, SamplingParams
    from .rollout.metrics import MixMetrics

    env_kwargs: dict[str, dict[str, Any]] = {}
    if args.mix and Path(args.mix).suffix in (".yaml", ".yml"):
        weights, env_kwargs = load_mix_file(args.mix)
    elif args.mix:
        weights, env_kwargs = parse_mix(_parse_weights(args.mix), source="--mix:")
    else:
        ids = args.env or list(DEFAULT_EVAL_ENVS)
        weights = {env_id: 1.0 / len(ids) for env_id in ids}
    if args.tasks:
        if len(weights) != 1:
            raise CascadeError("--tasks needs exactly one --env")
        env_kwargs.setdefault(next(iter(weights)), {})["tasks"] = args.tasks
    if args.judge_url:
        os.environ[JUDGE_URL_ENV] = args.judge_url  # read by every judged env given no judge_url
    try:
        mix = EnvMix(weights, seed=args.seed or 0, env_kwargs=env_kwargs)
    except JudgeUnavailable as exc:
        raise JudgeUnavailable(exc.owner, f"add --judge-url {SERVE_JUDGE_URL}") from None
    if args.ray:
        from .distributed import attach_ray

        attach_ray(mix, args.ray, env_actors=args.ray_actors)
    items = mix.sample(args.num_tasks) if args.num_tasks else mix.all_tasks(limit=args.limit)
    output = Path(args.output or f"runs/eval-{time.strftime('%Y%m%d-%H%M%S')}.jsonl")
    if output.exists():
        output.unlink()
    policy = _make_policy(args)
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
    from .env import run_sync

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


def cmd_train(args: argparse.Namespace) -> int:
    from .trainer.cli import train_main

    return train_main(args.config, args.set or [], from_stage=args.from_stage, nproc=args.nproc)


def cmd_serve_sandbox(args: argparse.Namespace) -> int:
    import importlib

    service = importlib.import_module(SANDBOX_SERVICE_MODULE)
    limits = {
        "max_body_mb": args.max_body_mb,
        "idle_timeout_s": args.idle_timeout,
        "request_timeout_s": args.request_timeout,
    }
    service.serve_sandbox(
        host=args.host,
        port=args.port,
        workers=args.workers,
        backend=args.backend,
        max_queue=args.max_queue,
        token=args.token,
        allow_remote=args.allow_remote,
        **{k: v for k, v in limits.items() if v is not None},  # None: the service's own default
    )
    return 0


def cmd_serve_judge(args: argparse.Namespace) -> int:
    from .judges.server import serve_judge

    options = {
        "max_tokens": args.max_tokens,
        "max_batch_size": args.max_batch_size,
        "max_queue": args.max_queue,
        "request_timeout_s": args.request_timeout,
    }
    serve_judge(
        args.host,
        args.port,
        args.model,
        allow_remote=args.allow_remote,
        token=args.token,
        device=args.device,
        **{k: v for k, v in options.items() if v is not None},
    )  # None: the server's own default
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    from .http_server import Limits
    from .serving.server import serve_env

    env_kwargs = json_object(args.env_kwargs, "--env-kwargs")
    if args.tasks:
        env_kwargs["tasks"] = args.tasks
    options = json_object(args.options, "--options")
    limits = Limits(
        **{
            k: v
            for k, v in {
                "max_body_mb": args.max_body_mb,
                "idle_timeout_s": args.idle_timeout,
            }.items()
            if v is not None
        }
    )
    serve_env(
        args.protocol,
        args.env_id,
        args.host,
        args.port,
        token=args.token,
        allow_remote=args.allow_remote,
        limits=limits,
        max_sessions=args.max_sessions,
        ttl_s=args.session_ttl,
        request_deadline_s=args.request_deadline,
        env_kwargs=env_kwargs,
        options=options,
    )
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from .export import export

    count = export(
        args.format,
        args.env_id,
        args.output,
        tasks=args.tasks,
        limit=args.limit,
        env_kwargs=json_object(args.env_kwargs, "--env-kwargs"),
        agent_name=args.agent_name,
    )
    print(f"wrote {count} rows of {args.env_id} to {args.output} ({args.format})")
    return 0


def cmd_filter(args: argparse.Namespace) -> int:
    from .env import run_sync
    from .filtering import FilterJob, FilterSettings, format_histogram
    from .judges import JUDGE_URL_ENV, SERVE_JUDGE_URL, JudgeUnavailable
    from .policy import SamplingParams

    env_kwargs = json_object(args.env_kwargs, "--env-kwargs")
    if args.judge_url:
        os.environ[JUDGE_URL_ENV] = args.judge_url  # read by every judged env given no judge_url
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
    policy: Any = _make_policy(args) if job.pending else None  # a finished folder needs no model

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

    try:
        summary = run_sync(run())
    except JudgeUnavailable as exc:
        raise JudgeUnavailable(exc.owner, f"add --judge-url {SERVE_JUDGE_URL}") from None
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


def cmd_rescore(args: argparse.Namespace) -> int:
    from .rescore import rescore

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


def _add_access_options(p: argparse.ArgumentParser, port: int, what: str) -> None:
    """``--host``, ``--port``, ``--token`` and ``--allow-remote``: who may connect (``serving.auth``)."""
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="(default %(default)s; another host needs --token or --allow-remote)",
    )
    p.add_argument("--port", type=int, default=port, help="(default %(default)s; 0 picks a free port)")
    p.add_argument(
        "--token",
        help="bearer token every request must carry (default: $CASCADE_ENVS_TOKEN; "
        "clients send 'Authorization: Bearer TOKEN')",
    )
    p.add_argument(
        "--allow-remote",
        action="store_true",
        help=f"allow a non-loopback --host without a token (anyone who reaches it can use the {what})",
    )


def _add_rollout_options(p: argparse.ArgumentParser) -> None:
    """The policy, sampling and runner options that ``eval`` and ``filter`` share."""
    p.add_argument("--policy", default="embedded", help="http(s)://HOST/v1, hf:PATH or embedded (default)")
    p.add_argument("--model", help="model name for an HTTP policy (default: the server's first)")
    p.add_argument(
        "--max-tokens", type=int, default=DEFAULT_MAX_TOKENS, help="per model turn (default %(default)s)"
    )
    p.add_argument("--temperature", type=float, default=DEFAULT_TEMPERATURE, help="(default %(default)s)")
    p.add_argument("--top-p", type=float, default=DEFAULT_TOP_P, help="(default %(default)s)")
    p.add_argument(
        "--concurrency",
        type=int,
        default=DEFAULT_CONCURRENCY,
        help="episodes in flight at once (default %(default)s)",
    )
    p.add_argument(
        "--request-timeout",
        type=float,
        default=600.0,
        metavar="S",
        help="overall deadline of one policy request, retries excluded (default %(default)s)",
    )
    p.add_argument(
        "--episode-timeout",
        type=float,
        default=None,
        metavar="S",
        help="wall-clock budget of one episode; past it the episode ends truncated",
    )
    p.add_argument(
        "--judge-url",
        metavar="URL[,URL...]",
        help="judge endpoint(s) of LLM-judged envs (default: $CASCADE_ENVS_JUDGE_URL)",
    )
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")


def cmd_build_image(args: argparse.Namespace) -> int:
    import importlib

    from .sandbox import images

    client = images.client(args.docker_host)
    cache = Path(args.cache) if args.cache else None
    kind = "swe-base" if args.kind == "swe" else args.kind
    if args.kind != "swe" or args.base == images.SWE_BASE_IMAGE:
        images.build_base(
            images.BASES[kind], client, cache_dir=cache, mirror=args.mirror, rebuild=args.rebuild
        )
    if args.kind == "swe":
        from .data import load_tasks

        swe = importlib.import_module(SWE_IMAGES_MODULE)
        read_task = importlib.import_module(SWE_IMAGES_MODULE.rpartition(".")[0] + ".task").read_task
        swe.build_images(
            load_tasks(args.tasks or "bundled:swe/tasks.jsonl", read_task), client, base=args.base
        )
    return 0


def _protocols() -> list[str]:
    from .serving.protocols import PROTOCOLS

    return list(PROTOCOLS)


def _formats() -> list[str]:
    from .export import FORMATS

    return list(FORMATS)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cascade-envs", description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("list", help="list environments, sandboxes and judges with their plugin")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(fn=cmd_list)

    p = sub.add_parser("info", help="describe one environment")
    p.add_argument("env_id", metavar="ID")
    p.set_defaults(fn=cmd_info)

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
        type=_seed,
        default=0,
        metavar="N|none",
        help="seeds the task draw and every request (seed + index; default %(default)s); 'none' sends "
        "no seed, so an HTTP server samples from its own RNG (vLLM on CPU needs this under load)",
    )
    _add_rollout_options(p)
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

    p = sub.add_parser(
        "train", help="RL training on an env mix, or a Cascade RL pipeline (default: the embedded smoke run)"
    )
    p.add_argument(
        "config",
        nargs="?",
        metavar="CONFIG",
        help="a config YAML or a shipped config name (if_rl, cascade_demo, ...); a file with a top-level "
        "'stages:' list runs a pipeline (default: the embedded single run)",
    )
    p.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="override a config value; in a pipeline: model.*/output_dir/eval.* set the pipeline, "
        "STAGE:KEY=VALUE one stage, any other key every stage",
    )
    p.add_argument(
        "--from-stage",
        metavar="NAME",
        help="pipeline only: train again from this stage on (its earlier runs are moved aside)",
    )
    p.add_argument(
        "--nproc",
        type=int,
        metavar="N",
        help="data-parallel ranks (train.world_size): above 1, N processes started with torchrun, the model "
        "sharded over them with FSDP2 (gloo on CPU, NCCL on GPU)",
    )
    p.set_defaults(fn=cmd_train)

    p = sub.add_parser("serve", help="serve an env over a trainer's protocol (nemo-gym, ...)")
    p.add_argument("env_id", metavar="ENV_ID")
    p.add_argument("--protocol", required=True, help="the protocol: " + ", ".join(sorted(_protocols())))
    _add_access_options(p, 8000, "env")
    p.add_argument("--tasks", metavar="PATH", help="task file of the env (default: its own)")
    p.add_argument("--env-kwargs", metavar="JSON", help="env constructor arguments as a JSON object")
    p.add_argument("--options", metavar="JSON", help="protocol options as a JSON object")
    p.add_argument(
        "--max-sessions", type=int, default=256, help="live sessions before a 503 (default %(default)s)"
    )
    p.add_argument(
        "--session-ttl",
        type=float,
        default=600.0,
        metavar="S",
        help="idle sessions expire (default %(default)s)",
    )
    p.add_argument(
        "--request-deadline",
        type=float,
        default=300.0,
        metavar="S",
        help="504 for a request not answered in time (default %(default)s)",
    )
    p.add_argument("--max-body-mb", type=float, help="request body limit; 413 past it (default 8)")
    p.add_argument(
        "--idle-timeout", type=float, metavar="S", help="close connections silent this long (default 30)"
    )
    p.set_defaults(fn=cmd_serve)

    p = sub.add_parser("export", help="write an env's rows in a trainer's data format (nemo-gym, ...)")
    p.add_argument("env_id", metavar="ENV_ID")
    p.add_argument("--format", required=True, help="the format: " + ", ".join(sorted(_formats())))
    p.add_argument("-o", "--output", required=True, metavar="PATH")
    p.add_argument("--tasks", metavar="PATH", help="task file (default: the env's own)")
    p.add_argument("--limit", type=int, help="at most this many rows")
    p.add_argument("--env-kwargs", metavar="JSON", help="env constructor arguments as a JSON object")
    p.add_argument(
        "--agent-name",
        help="the agent the rows name (default: the format's: verl 'cascade', nemo-gym 'cascade_agent', written as"
        " the rows' task_source)",
    )
    p.set_defaults(fn=cmd_export)

    p = sub.add_parser("serve-sandbox", help="run the code-verification HTTP service")
    _add_access_options(p, 8765, "sandbox")
    p.add_argument(
        "--workers", type=int, default=None, help="concurrent verifications (default: one per core)"
    )
    p.add_argument(
        "--max-queue",
        type=int,
        default=None,
        help="queued requests before answering 429 (default: 64 per worker)",
    )
    p.add_argument("--backend", default=None, help="sandbox backend (default: bwrap where present)")
    p.add_argument("--max-body-mb", type=float, help="request body limit; 413 past it (default 8)")
    p.add_argument(
        "--idle-timeout", type=float, metavar="S", help="close connections silent this long (default 30)"
    )
    p.add_argument(
        "--request-timeout",
        type=float,
        metavar="S",
        help="408 for a request not fully received in time (default 60)",
    )
    p.set_defaults(fn=cmd_serve_sandbox)

    p = sub.add_parser(
        "serve-judge", help="serve a local model as an LLM judge (OpenAI chat-completions API)"
    )
    _add_access_options(p, 8011, "model")
    p.add_argument(
        "--model", default="embedded", help="'embedded' (SmolLM2-135M, the default) or a checkpoint folder"
    )
    p.add_argument("--max-tokens", type=int, help="cap on the tokens of one reply (default 512)")
    p.add_argument("--max-batch-size", type=int, help="requests generated together (default 16)")
    p.add_argument("--max-queue", type=int, help="requests waiting or running before a 429 (default 256)")
    p.add_argument(
        "--request-timeout", type=float, metavar="S", help="504 for a reply not ready in time (default 300)"
    )
    p.add_argument("--device", help="torch device (default: cuda when available)")
    p.set_defaults(fn=cmd_serve_judge)

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
    _add_rollout_options(p)
    p.add_argument(
        "-o",
        "--output",
        required=True,
        metavar="OUT_DIR",
        help="output folder (outcomes.jsonl, kept.jsonl, histogram.txt, ...); rerun to resume",
    )
    p.add_argument("--force", action="store_true", help="start over in an OUT_DIR made with other arguments")
    p.set_defaults(fn=cmd_filter)

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

    from .tts.cli import add_parser as add_solve_parser

    add_solve_parser(sub, _add_rollout_options, _seed, _make_policy)

    p = sub.add_parser(
        "build-image", help="build a docker image offline: sandbox, swe-base, or the SWE tasks' images"
    )
    p.add_argument(
        "kind",
        choices=("sandbox", "swe-base", "swe"),
        help="sandbox: cascade-sandbox:bookworm (python3, g++); swe-base: cascade-swe-base:bookworm "
        "(python3, pytest, patch, git); swe: one image per task row without an image (swe-base + "
        "the repository at its workdir + its install_cmd)",
    )
    p.add_argument("--tasks", metavar="PATH", help="swe: the task rows (default bundled:swe/tasks.jsonl)")
    p.add_argument(
        "--base",
        default="cascade-swe-base:bookworm",
        metavar="IMAGE",
        help="swe: the image the per-instance images start from (default %(default)s, built if missing)",
    )
    p.add_argument(
        "--mirror", metavar="URL", help="Debian mirror for mmdebstrap (default http://deb.debian.org/debian)"
    )
    p.add_argument(
        "--cache",
        metavar="DIR",
        help="where root file system tarballs are kept (default "
        "$CASCADE_ENVS_IMAGE_CACHE or ~/.cache/cascade-envs/images)",
    )
    p.add_argument(
        "--rebuild", action="store_true", help="run mmdebstrap again even when a tarball is cached"
    )
    p.add_argument(
        "--docker-host", metavar="URL", help="the daemon (default $DOCKER_HOST or the local socket)"
    )
    p.set_defaults(fn=cmd_build_image)

    parser.epilog = f"docs: {DOCS_PAGE}"
    for name, command in sub.choices.items():
        command.epilog = f"docs: {COMMAND_DOCS[name]}"
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(message)s")
    try:
        return int(args.fn(args) or 0)
    except KeyboardInterrupt:
        print("cascade-envs: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        if os.environ.get("CASCADE_ENVS_DEBUG"):
            raise
        known = isinstance(exc, (CascadeError, OSError, ValueError))
        prefix = "error" if known else f"unexpected {type(exc).__name__}"
        text = str(exc) if known else str(exc).splitlines()[0] if str(exc) else ""
        print(f"cascade-envs: {prefix}: {text}", file=sys.stderr)
        return 2 if known else 1


if __name__ == "__main__":
    sys.exit(main())
