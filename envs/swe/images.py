"""Per-instance SWE images for the docker backend: ``swe-base`` with a row's repository at its workdir.

``image_for(task)`` is the image a row's episodes (and its clean-room grading) run in: the row's
own ``image`` (SWE-bench, SWE-Gym and R2E rows name one), else ``cascade-swe-<instance>:<hash>``,
where the hash covers the repository's files and modes, the workdir, the base image and the row's
``install_cmd``, so a changed row never runs in a stale image. ``build_images`` (``cascade-envs
build-image swe``) builds the missing ones offline: ``FROM cascade-swe-base:bookworm``, the
repository copied to the workdir, then ``install_cmd`` (the repository's test dependencies, e.g.
``pip install -e .[test]``, run at build time). A missing image is never built behind the user's
back: the session start fails naming the command (``sandbox/images.py``), and the episode is masked.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from typing import Any

from cascade_envs.sandbox import images
from cascade_envs.sandbox.workspace import source_files

from .task import MAX_SNAPSHOT_MB, SweTask

Files = dict[str, tuple[bytes, int]]


def repository_files(task: SweTask) -> Files:
    """The row's repository as ``{path: (data, mode)}`` (its snapshot or host directory); empty for an image row."""
    if task.files is not None:
        return {path: (text.encode(), 0o644) for path, text in task.files.items()}
    if task.source is not None:
        return {
            path: (f.data, f.mode)
            for chunk in source_files(task.source, MAX_SNAPSHOT_MB)
            for path, f in chunk.items()
        }
    return {}


def image_for(task: SweTask, base: str = images.SWE_BASE_IMAGE, files: Files | None = None) -> str:
    """The image the row's episodes run in on docker: its own, else its per-instance image's name."""
    if task.image:
        return task.image
    files = repository_files(task) if files is None else files
    digest = hashlib.sha256(json.dumps([images.FORMAT, base, task.workdir, task.install_cmd]).encode())
    for path in sorted(files):
        data, mode = files[path]
        digest.update(f"\0{path}\0{mode:o}\0{len(data)}\0".encode())
        digest.update(data)
    name = re.sub(r"[^a-z0-9]+", "-", task.instance_id.lower()).strip("-")[:100] or "task"
    return f"{images.SWE_IMAGE_PREFIX}{name}:{digest.hexdigest()[:16]}"


def build_images(
    tasks: Iterable[SweTask],
    docker_client: Any,
    *,
    base: str = images.SWE_BASE_IMAGE,
    log: images.Log = print,
) -> list[str]:
    """Build the per-instance image of every task that names none (kept when present); their names."""
    built: list[str] = []
    for task in tasks:
        if task.image:
            log(f"{task.instance_id or 'a row'}: names its own image {task.image}: skipped")
            continue
        files = repository_files(task)
        name = image_for(task, base, files)
        if name not in built:
            present = images.labelled(docker_client, name, name.rpartition(":")[2])
            images.build_tree(
                docker_client,
                base,
                name,
                files,
                task.workdir,
                key=name.rpartition(":")[2],
                run=task.install_cmd,
            )
            log(f"{name}: {'present' if present else 'built'}")
            built.append(name)
    return built
