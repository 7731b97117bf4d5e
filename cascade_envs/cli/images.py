"""``build-image``: docker images built offline (the sandbox, the SWE base, the SWE tasks' images)."""

from __future__ import annotations

import argparse
import importlib
from pathlib import Path
from typing import Any

SWE_IMAGES_MODULE = "cascade_envs.envs.swe.images"
"""The SWE env's per-instance images, built by ``build-image swe`` (imported by name, when used)."""


def add_parsers(sub: Any) -> None:
    """Add ``build-image``."""
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


def cmd_build_image(args: argparse.Namespace) -> int:
    from ..sandbox import images as sandbox_images

    client = sandbox_images.client(args.docker_host)
    cache = Path(args.cache) if args.cache else None
    kind = "swe-base" if args.kind == "swe" else args.kind
    if args.kind != "swe" or args.base == sandbox_images.SWE_BASE_IMAGE:
        sandbox_images.build_base(
            sandbox_images.BASES[kind], client, cache_dir=cache, mirror=args.mirror, rebuild=args.rebuild
        )
    if args.kind == "swe":
        from ..data import load_tasks

        swe = importlib.import_module(SWE_IMAGES_MODULE)
        read_task = importlib.import_module(SWE_IMAGES_MODULE.rpartition(".")[0] + ".task").read_task
        swe.build_images(
            load_tasks(args.tasks or "bundled:swe/tasks.jsonl", read_task), client, base=args.base
        )
    return 0
