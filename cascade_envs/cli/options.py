"""Argument types and option groups that several subcommands share."""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Iterator
from typing import Any

from ..core import CascadeError
from ..defaults import DEFAULT_CONCURRENCY, DEFAULT_MAX_TOKENS, DEFAULT_TEMPERATURE, DEFAULT_TOP_P


def parse_weights(text: str) -> dict[str, float]:
    """``"ID=W,ID2=W2"`` (a bare ``ID`` weighs 1) as a mapping for ``parse_mix``."""
    weights: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        env_id, sep, weight = part.partition("=")
        try:
            weights[env_id.strip()] = float(weight) if sep else 1.0
        except ValueError:
            raise CascadeError(f"bad weight in --mix {part!r}: expected ID=NUMBER") from None
    return weights


def seed_or_none(text: str) -> int | None:
    """``--seed``: an int, or ``none`` for requests that carry no seed (the server samples freely)."""
    if text.strip().lower() == "none":
        return None
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer or 'none', got {text!r}") from None


def make_policy(args: argparse.Namespace) -> Any:
    """The policy of ``--policy`` (with ``--model`` and ``--request-timeout`` for an HTTP one)."""
    from .. import rollout

    if args.policy.startswith("http"):
        return rollout.make_policy(args.policy, model=args.model, timeout_s=args.request_timeout)
    return rollout.make_policy(args.policy)


@contextlib.contextmanager
def judge_url_option(args: argparse.Namespace) -> Iterator[None]:
    """Apply ``--judge-url`` (of ``add_rollout_options``) to the envs made inside: every judged env
    given no ``judge_url`` reads it from ``$CASCADE_ENVS_JUDGE_URL``, and one left without a judge
    says to add ``--judge-url``."""
    from ..judges import JUDGE_URL_ENV, SERVE_JUDGE_URL, JudgeUnavailable

    if args.judge_url:
        os.environ[JUDGE_URL_ENV] = args.judge_url
    try:
        yield
    except JudgeUnavailable as exc:
        raise JudgeUnavailable(exc.owner, f"add --judge-url {SERVE_JUDGE_URL}") from None


def add_access_options(p: argparse.ArgumentParser, port: int, what: str) -> None:
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


def add_rollout_options(p: argparse.ArgumentParser) -> None:
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
