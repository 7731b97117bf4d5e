"""The ``cascade-envs`` command: evaluate, train on, serve, filter and rescore RL environments.

Each module of ``COMMAND_MODULES`` adds its subcommands with ``add_parsers(sub)`` and runs them
with a ``cmd_*`` function. Every failure the user can fix is one line on stderr and a non-zero exit
code; set ``CASCADE_ENVS_DEBUG=1`` for a traceback.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from ..core import CascadeError
from . import catalog, evaluate, filtering, images, rescore, serve, solve, train

COMMAND_MODULES = (catalog, evaluate, train, serve, filtering, rescore, solve, images)
"""The subcommand modules, in the order ``--help`` lists their commands."""
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


def build_parser() -> argparse.ArgumentParser:
    """The ``cascade-envs`` parser: every subcommand, each ending its help with its docs page."""
    parser = argparse.ArgumentParser(
        prog="cascade-envs", description=__doc__.splitlines()[0].replace("``", "")
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in COMMAND_MODULES:
        module.add_parsers(sub)
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
