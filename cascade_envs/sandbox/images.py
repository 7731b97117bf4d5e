"""Docker images without a registry: Debian roots built offline, and trees baked into them.

``cascade-envs build-image`` (``cli.py``) drives these:

- ``sandbox`` makes ``cascade-sandbox:bookworm``: ``python3`` and ``g++`` (C++17), the docker
  backend's default image and what the code env runs;
- ``swe-base`` makes ``cascade-swe-base:bookworm``: ``python3``, ``pytest``, ``patch``, ``git``
  (``bash``, ``tar``, ``xargs`` are in every Debian root), what the SWE env's tools and grader run;
- ``swe`` makes one image per SWE task row that names none: ``swe-base`` with the row's repository
  at its workdir (``envs/swe/images.py``, on ``build_tree`` here).

A base image is a root file system made by ``mmdebstrap --variant=apt`` (as root) from a Debian
mirror and imported with ``docker import``. Its tarball is cached under ``cache_dir`` (default:
``$CASCADE_ENVS_IMAGE_CACHE``, else ``~/.cache/cascade-envs/images``) under a hash of what it
holds, which the image carries as a label: an image with the right label is kept, a missing one is
imported from the cached tarball (seconds), and only a missing tarball runs mmdebstrap (minutes).
Concurrent builders of one image wait for each other (a file lock). Nothing is ever pulled.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .results import SandboxError

SANDBOX_IMAGE = "cascade-sandbox:bookworm"
SWE_BASE_IMAGE = "cascade-swe-base:bookworm"
SWE_IMAGE_PREFIX = "cascade-swe-"
"""Per-instance SWE images are named ``cascade-swe-<instance>:<hash>`` (``envs/swe/images.py``)."""
KEY_LABEL = "cascade-envs.image"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
DEFAULT_SUITE = "bookworm"
FORMAT = 1
"""Bump when the way images are made changes: every cached tarball and image is then rebuilt."""
SLIM = ("/usr/share/doc/*", "/usr/share/man/*", "/usr/share/locale/*")
BUILD_TIMEOUT_S = 1800.0
API_TIMEOUT_S = 900

Log = Callable[[str], None]


@dataclass(frozen=True)
class BaseImage:
    """A Debian root holding ``packages`` (and apt's essential set), as image ``name``."""

    name: str
    packages: tuple[str, ...]
    suite: str = DEFAULT_SUITE

    @property
    def key(self) -> str:
        """A hash of what the image holds: its label, and its cached tarball's name."""
        text = json.dumps([FORMAT, self.suite, sorted(self.packages), SLIM])
        return hashlib.sha256(text.encode()).hexdigest()[:16]


BASES = {
    "sandbox": BaseImage(SANDBOX_IMAGE, ("python3", "g++")),
    "swe-base": BaseImage(SWE_BASE_IMAGE, ("python3", "python3-pytest", "patch", "git")),
}


def build_hint(image: str) -> str:
    """How to get ``image`` onto this machine (for the error a missing image raises)."""
    for kind, base in BASES.items():
        if image == base.name:
            return f"build it with `cascade-envs build-image {kind}`"
    if image.startswith(SWE_IMAGE_PREFIX):
        return "build it with `cascade-envs build-image swe --tasks <the task file>`"
    return (
        f"images are never pulled here: fetch or build it yourself (`docker pull {image}` or `docker load`)"
    )


def default_cache_dir() -> Path:
    folder = os.environ.get("CASCADE_ENVS_IMAGE_CACHE")
    return Path(folder) if folder else Path.home() / ".cache" / "cascade-envs" / "images"


def client(base_url: str | None = None, timeout_s: float = API_TIMEOUT_S) -> Any:
    """A client of the daemon at ``base_url`` (default: ``DOCKER_HOST`` or the local socket) that answered a
    ping; every call is bounded by ``timeout_s``. ``SandboxError``, saying why, when none answers."""
    try:
        import docker
    except ImportError:
        raise SandboxError("the docker SDK is not installed: pip install 'cascade-envs[swe]'") from None
    environment = {**os.environ, "DOCKER_HOST": base_url} if base_url else None
    try:
        made = docker.from_env(timeout=int(max(1, timeout_s)), max_pool_size=64, environment=environment)
    except Exception as exc:
        raise SandboxError(f"no Docker daemon reachable: {type(exc).__name__}: {exc}") from None
    try:
        made.ping()
    except Exception as exc:
        made.close()
        raise SandboxError(f"no Docker daemon reachable: {type(exc).__name__}: {exc}") from None
    return made


def labelled(docker_client: Any, name: str, key: str) -> bool:
    """Whether image ``name`` is present and carries ``key`` (so it holds what was asked)."""
    import docker.errors

    try:
        image = docker_client.images.get(name)
    except docker.errors.ImageNotFound:
        return False
    return (image.labels or {}).get(KEY_LABEL) == key


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def build_base(
    spec: BaseImage,
    docker_client: Any,
    *,
    cache_dir: Path | None = None,
    mirror: str | None = None,
    rebuild: bool = False,
    log: Log = print,
) -> str:
    """Make sure image ``spec.name`` holds ``spec``: keep it, import the cached tarball, or build it."""
    cache = cache_dir or default_cache_dir()
    tarball = cache / f"{spec.name.replace(':', '-').replace('/', '-')}-{spec.key}.tar"
    with _locked(cache / f"{spec.key}.lock"):
        if not rebuild and labelled(docker_client, spec.name, spec.key):
            log(f"{spec.name}: present")
            return spec.name
        start = time.monotonic()
        if rebuild or not tarball.exists():
            _debootstrap(spec, tarball, mirror or DEFAULT_MIRROR, log)
        changes = [
            f"LABEL {KEY_LABEL}={spec.key}",
            "ENV LANG=C.UTF-8",
            "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        ]
        repository, _, tag = spec.name.rpartition(":")
        docker_client.api.import_image_from_file(
            str(tarball), repository=repository, tag=tag, changes=changes
        )
        if not labelled(docker_client, spec.name, spec.key):
            raise SandboxError(f"importing {tarball} did not make image {spec.name}")
        log(f"{spec.name}: imported from {tarball} in {time.monotonic() - start:.1f} s")
    return spec.name


def _debootstrap(spec: BaseImage, tarball: Path, mirror: str, log: Log) -> None:
    exe = shutil.which("mmdebstrap")
    if exe is None:
        raise SandboxError("building a base image needs mmdebstrap: apt-get install mmdebstrap")
    partial = tarball.with_suffix(".partial.tar")
    argv = [
        exe,
        "--variant=apt",
        f"--include={','.join(spec.packages)}",
        "--quiet",
        *(f"--dpkgopt=path-exclude={path}" for path in SLIM),
        spec.suite,
        str(partial),
        mirror,
    ]
    log(f"{spec.name}: mmdebstrap {spec.suite} with {', '.join(spec.packages)} from {mirror} (a few minutes)")
    start = time.monotonic()
    try:
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=BUILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        partial.unlink(missing_ok=True)
        raise SandboxError(f"mmdebstrap did not finish within {BUILD_TIMEOUT_S:g} s") from None
    if done.returncode:
        partial.unlink(missing_ok=True)
        tail = " ".join(done.stderr.decode(errors="replace").split()[-60:])
        raise SandboxError(f"mmdebstrap failed (exit {done.returncode}): {tail}")
    partial.replace(tarball)
    log(
        f"{spec.name}: root file system built in {time.monotonic() - start:.0f} s ({tarball.stat().st_size >> 20} MB)"
    )


def build_tree(
    docker_client: Any,
    base: str,
    name: str,
    files: Mapping[str, tuple[bytes, int]],
    target: str,
    *,
    key: str,
    run: str | None = None,
) -> str:
    """Image ``name``: ``base`` with ``files`` (``{relative path: (data, mode)}``) at ``target``, then ``run``.

    Kept when present with label ``key``. ``run`` is a shell command run in the image at build time
    (e.g. installing test dependencies), with the daemon's default network.
    """
    import docker.errors

    if labelled(docker_client, name, key):
        return name
    lines = [f"FROM {base}", f"COPY tree/ {target}/"]
    if run:
        lines.append(f"RUN {json.dumps(['/bin/sh', '-c', run])}")
    lines.append(f"LABEL {KEY_LABEL}={key}")
    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as tar:
        _add(tar, "Dockerfile", "\n".join(lines).encode() + b"\n", 0o644)
        _add(tar, "tree/", b"", 0o755, directory=True)
        for path, (data, mode) in sorted(files.items()):
            _add(tar, f"tree/{path}", data, mode)
    context.seek(0)
    try:
        docker_client.images.build(
            fileobj=context, custom_context=True, tag=name, rm=True, forcerm=True, pull=False
        )
    except docker.errors.BuildError as exc:
        tail = " ".join(
            "".join(str(step.get("stream", step.get("error", ""))) for step in exc.build_log).split()
        )
        raise SandboxError(f"building image {name} failed: {exc.msg}: {tail[-600:]}") from None
    except docker.errors.APIError as exc:
        raise SandboxError(f"building image {name} failed: {exc.explanation or exc}") from None
    return name


def _add(tar: tarfile.TarFile, path: str, data: bytes, mode: int, directory: bool = False) -> None:
    info = tarfile.TarInfo(path)
    info.mode, info.mtime = mode, 0
    if directory:
        info.type = tarfile.DIRTYPE
        tar.addfile(info)
    else:
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
