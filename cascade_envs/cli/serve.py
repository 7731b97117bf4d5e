"""The servers (``serve`` for a trainer's protocol, ``serve-sandbox``, ``serve-judge``) and ``export``,
which writes what ``serve`` would hand out as a file."""

from __future__ import annotations

import argparse
import importlib
from typing import Any

from ..core import json_object
from .options import add_access_options

SANDBOX_SERVICE_MODULE = "cascade_envs.envs.code.service"
"""The code env's verification service, run by ``serve-sandbox`` (imported by name, when used)."""


def add_parsers(sub: Any) -> None:
    """Add ``serve``, ``export``, ``serve-sandbox`` and ``serve-judge``."""
    p = sub.add_parser("serve", help="serve an env over a trainer's protocol (nemo-gym, ...)")
    p.add_argument("env_id", metavar="ENV_ID")
    p.add_argument("--protocol", required=True, help="the protocol: " + ", ".join(sorted(protocols())))
    add_access_options(p, 8000, "env")
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
    add_connection_limits(p)
    p.set_defaults(fn=cmd_serve)

    p = sub.add_parser("export", help="write an env's rows in a trainer's data format (nemo-gym, ...)")
    p.add_argument("env_id", metavar="ENV_ID")
    p.add_argument("--format", required=True, help="the format: " + ", ".join(sorted(formats())))
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
    add_access_options(p, 8765, "sandbox")
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
    add_connection_limits(p)
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
    add_access_options(p, 8011, "model")
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


def add_connection_limits(p: argparse.ArgumentParser) -> None:
    """``--max-body-mb`` and ``--idle-timeout``, the HTTP layer's limits that ``serve`` and ``serve-sandbox``
    share (unset: ``http_server``'s defaults)."""
    p.add_argument("--max-body-mb", type=float, help="request body limit; 413 past it (default 8)")
    p.add_argument(
        "--idle-timeout", type=float, metavar="S", help="close connections silent this long (default 30)"
    )


def given(**options: Any) -> dict[str, Any]:
    """The options the user set (``None``: not set, so the server's own default applies)."""
    return {name: value for name, value in options.items() if value is not None}


def cmd_serve(args: argparse.Namespace) -> int:
    from ..http_server import Limits
    from ..serving.server import serve_env

    env_kwargs = json_object(args.env_kwargs, "--env-kwargs")
    if args.tasks:
        env_kwargs["tasks"] = args.tasks
    options = json_object(args.options, "--options")
    limits = Limits(**given(max_body_mb=args.max_body_mb, idle_timeout_s=args.idle_timeout))
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
    from ..export import export

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


def cmd_serve_sandbox(args: argparse.Namespace) -> int:

    service = importlib.import_module(SANDBOX_SERVICE_MODULE)
    service.serve_sandbox(
        host=args.host,
        port=args.port,
        workers=args.workers,
        backend=args.backend,
        max_queue=args.max_queue,
        token=args.token,
        allow_remote=args.allow_remote,
        **given(
            max_body_mb=args.max_body_mb,
            idle_timeout_s=args.idle_timeout,
            request_timeout_s=args.request_timeout,
        ),
    )
    return 0


def cmd_serve_judge(args: argparse.Namespace) -> int:
    from ..judges.server import serve_judge

    serve_judge(
        args.host,
        args.port,
        args.model,
        allow_remote=args.allow_remote,
        token=args.token,
        device=args.device,
        **given(
            max_tokens=args.max_tokens,
            max_batch_size=args.max_batch_size,
            max_queue=args.max_queue,
            request_timeout_s=args.request_timeout,
        ),
    )
    return 0


def protocols() -> list[str]:
    from ..serving.protocols import PROTOCOLS

    return list(PROTOCOLS)


def formats() -> list[str]:
    from ..export import FORMATS

    return list(FORMATS)
