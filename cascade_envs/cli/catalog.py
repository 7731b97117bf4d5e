"""``list`` and ``info``: what is installed, and one environment in detail."""

from __future__ import annotations

import argparse
import json
from typing import Any


def add_parsers(sub: Any) -> None:
    """Add ``list`` and ``info``."""
    p = sub.add_parser("list", help="list environments, sandboxes and judges with their plugin")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(fn=cmd_list)

    p = sub.add_parser("info", help="describe one environment")
    p.add_argument("env_id", metavar="ID")
    p.set_defaults(fn=cmd_info)


def cmd_list(args: argparse.Namespace) -> int:
    from ..plugins.manager import failures
    from ..registry import env_specs, judges, sandboxes

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
    from ..registry import spec

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
