"""Docker images in the public SWE datasets' layouts, built offline for the tests (``layout_rows.py`` holds
the repositories and rows in them).

Every layout is ``cascade-swe-layout:bookworm`` (a Debian root made by mmdebstrap: ``python3``
*without* pytest, ``python3-venv``, ``git``, ``patch``) plus:

- a venv where the dataset keeps its interpreter, with packages installed from the wheels that
  ``.ci/swe.sh`` downloads (``$CASCADE_SWE_WHEELS``, default ``build/swe-wheels``): the conda env
  path ``/opt/miniconda3/envs/testbed`` (SWE-bench, SWE-Gym, SWE-smith) or ``/testbed/.venv``
  (R2E-Gym, whose package is not installed there);
- the repository at ``/testbed`` as a git checkout at its base commit (a ``.pth`` in the venv
  pointing at it where the dataset installs the package in development mode);
- files outside the repository (R2E-Gym's hidden tests in ``/r2e_tests``).

An image carries a label hashing everything it was made of, so a test session keeps a present
image, and builds a missing one in seconds (the venv layer is shared by the images of one venv).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
import time
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import pytest

from cascade_envs.sandbox import images
from tests import docker_support

WHEELS = Path(os.environ.get("CASCADE_SWE_WHEELS") or docker_support.ROOT / "build" / "swe-wheels")
BASE = images.BaseImage("cascade-swe-layout:bookworm", ("python3", "python3-venv", "patch", "git"))
CONDA = "/opt/miniconda3/envs/testbed"
FORMAT = 1
Tree = dict[str, bytes]


@dataclass(frozen=True)
class Layout:
    """An image: ``packages`` in a venv at ``venv``, ``tree`` at ``/testbed`` (a git checkout), ``extra`` at /."""

    venv: str
    packages: tuple[str, ...]
    tree: Tree
    extra: Tree = field(default_factory=dict)
    editable: bool = False
    """A ``.pth`` in the venv pointing at ``/testbed``, as ``pip install -e .`` leaves."""

    def dockerfile(self) -> str:
        site = f"{self.venv}/lib/python3.11/site-packages"
        commit = "git -c user.name=cascade -c user.email=cascade@localhost commit -qm base"
        return "\n".join(
            [
                f"FROM {BASE.name}",
                "COPY wheels/ /tmp/wheels/",
                f"RUN python3 -m venv {self.venv} && {self.venv}/bin/pip install -q --no-index "
                f"--find-links /tmp/wheels {' '.join(self.packages)} && rm -rf /tmp/wheels",
                "COPY tree/ /testbed/",
                *(["COPY extra/ /"] if self.extra else []),
                f"RUN cd /testbed && git init -q && git add -A && {commit}"
                + (f" && echo /testbed > {site}/testbed.pth" if self.editable else ""),
            ]
        )

    def key(self) -> str:
        digest = hashlib.sha256(json.dumps([FORMAT, BASE.key, self.dockerfile(), sorted(wheels())]).encode())
        for prefix, files in (("tree", self.tree), ("extra", self.extra)):
            for path in sorted(files):
                digest.update(f"\0{prefix}/{path}\0{len(files[path])}\0".encode() + files[path])
        return digest.hexdigest()[:16]


def wheels() -> list[str]:
    return sorted(p.name for p in WHEELS.glob("*.whl"))


@cache
def unavailable() -> str | None:
    """Why the layout images cannot be built here (no daemon, no wheels, no base), or ``None``."""
    why = docker_support.daemon_reason()
    if why is not None:
        return why
    if not wheels() or not sdist("Django-4.2.16").exists():
        return f"the layout wheels are missing from {WHEELS}: .ci/swe.sh downloads them"
    try:
        images.build_base(BASE, docker_support.client(), cache_dir=docker_support.CACHE, log=log)
    except Exception as exc:
        return f"image {BASE.name} could not be built: {exc}"
    return None


def require() -> None:
    """Skip (or, in CI, fail) the calling test unless the layout images can be built."""
    why = unavailable()
    if why is not None:
        message = f"the SWE layout tests need docker and the layout wheels: {why}"
        if docker_support.REQUIRED:
            pytest.fail(message + " (CASCADE_ENVS_REQUIRE_DOCKER=1)")
        pytest.skip(message)


def log(message: str) -> None:
    print(f"swe layout image {message}", flush=True)


def build(layout: Layout, *names: str) -> str:
    """Make sure image ``names[0]`` holds ``layout`` (built when missing or stale); tag it with the other names."""
    require()
    client, key = docker_support.client(), layout.key()
    if not images.labelled(client, names[0], key):
        start = time.monotonic()
        context = io.BytesIO()
        with tarfile.open(fileobj=context, mode="w") as tar:
            _add(tar, "Dockerfile", layout.dockerfile().encode() + b"\n")
            for name in wheels():
                _add(tar, f"wheels/{name}", (WHEELS / name).read_bytes())
            for prefix, files in (("tree", layout.tree), ("extra", layout.extra)):
                for path, data in files.items():
                    _add(tar, f"{prefix}/{path}", data)
            _add(tar, "extra/.keep", b"")
        context.seek(0)
        image, _ = client.images.build(
            fileobj=context,
            custom_context=True,
            tag=names[0],
            rm=True,
            forcerm=True,
            pull=False,
            labels={images.KEY_LABEL: key},
        )
        log(f"{names[0]}: built in {time.monotonic() - start:.1f} s")
    image = client.images.get(names[0])
    for name in names[1:]:
        repository, _, tag = name.rpartition(":") if ":" in name.rsplit("/", 1)[-1] else (name, "", "latest")
        image.tag(repository, tag)
    return names[0]


def _add(tar: tarfile.TarFile, path: str, data: bytes) -> None:
    info = tarfile.TarInfo(path)
    info.size, info.mode, info.mtime = len(data), 0o755 if path.startswith("tree/bin/") else 0o644, 0
    tar.addfile(info, io.BytesIO(data))


def sdist(name: str) -> Path:
    return WHEELS / f"{name}.tar.gz"
