"""Docker for the tests: the daemon, the images, and what a test leaves behind.

Where a Docker daemon answers (``DOCKER_HOST`` or the local socket), the test session makes sure
the images exist before any test runs (``prepare``, from ``conftest.pytest_configure``): kept when
present, imported from ``build/images/`` when cached there, else built with mmdebstrap (minutes,
once). Docker tests skip, saying why, where there is no daemon; with
``CASCADE_ENVS_REQUIRE_DOCKER=1`` (``.ci/run``) they fail instead, so none skips in CI.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / "build" / "images"
STATE = CACHE / "prepared.json"
REQUIRED = os.environ.get("CASCADE_ENVS_REQUIRE_DOCKER") == "1"
KINDS = ("sandbox", "swe-base")


def daemon_reason() -> str | None:
    from cascade_envs.sandbox import available_backends

    return available_backends().get("docker", "docker is not registered")


def prepare(log: Any = print) -> None:
    """Build or import the test images once per test session (the controller process, before workers)."""
    reasons: dict[str, str | None] = {}
    why = daemon_reason()
    if why is None:
        from cascade_envs.sandbox import images

        def build(kind: str) -> str | None:
            try:
                images.build_base(
                    images.BASES[kind],
                    images.client(),
                    cache_dir=CACHE,
                    log=lambda m: log(f"docker test image {m}"),
                )
            except Exception as exc:
                return f"image {images.BASES[kind].name} could not be built: {exc}"
            return None

        with ThreadPoolExecutor(len(KINDS)) as pool:  # a first run builds both roots at once (minutes each)
            reasons = dict(zip(KINDS, pool.map(build, KINDS), strict=True))
    CACHE.mkdir(parents=True, exist_ok=True)
    STATE.write_text(json.dumps({"daemon": why, "images": reasons}))


@cache
def unavailable(kind: str = "sandbox") -> str | None:
    """Why docker tests needing image ``kind`` cannot run here, or ``None``."""
    why = daemon_reason()
    if why is not None:
        return why
    from cascade_envs.sandbox import images

    spec = images.BASES[kind]
    if images.labelled(client(), spec.name, spec.key):
        return None
    try:
        built = json.loads(STATE.read_text())["images"].get(kind)
    except (OSError, ValueError, KeyError):
        built = None
    return built or f"image {spec.name} is missing (the test session builds it when it starts)"


def require(kind: str = "sandbox") -> None:
    """Skip (or, in CI, fail) the calling test unless docker and image ``kind`` are ready."""
    why = unavailable(kind)
    if why is not None:
        message = f"docker tests need a daemon and image {kind!r}: {why}"
        if REQUIRED:
            pytest.fail(message + " (CASCADE_ENVS_REQUIRE_DOCKER=1)")
        pytest.skip(message)


@cache
def client() -> Any:
    """One docker client for the tests' own look-ups."""
    from cascade_envs.sandbox import images

    return images.client()


def containers(label: str) -> list[dict[str, Any]]:
    """Every container (running or not) carrying ``label`` (``key=value``), as the daemon lists them.

    The low-level list: the SDK's ``containers.list`` inspects each one afterwards and fails on a
    container removed in between (``--rm``).
    """
    return client().api.containers(all=True, filters={"label": label})


def volumes() -> set[str]:
    return {v.name for v in client().volumes.list()}


class PrivateDaemon:
    """A Docker daemon of a test's own (socket, data and state under ``folder``), to stop and start at will.

    It gets a bridge of its own and no iptables rules (its containers only ever run without network):
    ``--bridge=none`` would make it delete the ``docker0`` of the machine's daemon. ``start`` imports the
    cached root of ``kind`` into it, so the image exists there too.
    """

    def __init__(self, folder: Path, kind: str = "sandbox"):
        self.folder, self.kind = folder, kind
        self.url = f"unix://{folder}/d.sock"
        self.bridge = f"cdt{os.getpid() % 100000}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 60.0) -> None:
        from cascade_envs.sandbox import images

        exe = shutil.which("dockerd")
        if exe is None:
            (pytest.fail if REQUIRED else pytest.skip)("dockerd is not installed (apt-get install docker.io)")
        subprocess.run(["ip", "link", "add", "name", self.bridge, "type", "bridge"], capture_output=True)
        with open(self.folder / "dockerd.log", "ab") as log:
            self.proc = subprocess.Popen(
                [
                    exe,
                    "-H",
                    self.url,
                    "--data-root",
                    f"{self.folder}/data",
                    "--exec-root",
                    f"{self.folder}/x",
                    "--pidfile",
                    f"{self.folder}/d.pid",
                    f"--bridge={self.bridge}",
                    "--iptables=false",
                    "--ip-masq=false",
                    "--shutdown-timeout=2",
                ],
                stdout=subprocess.DEVNULL,
                stderr=log,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                client = images.client(self.url)
                break
            except Exception:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    tail = (self.folder / "dockerd.log").read_text()[-800:]
                    raise AssertionError(f"private dockerd did not start: {tail}") from None
                time.sleep(0.2)
        images.build_base(images.BASES[self.kind], client, cache_dir=CACHE, log=lambda m: None)

    def stop(self) -> None:
        """Stop the daemon as ``systemctl stop docker`` would (SIGTERM) and wait for it to exit."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, 9)
                self.proc.wait(10)

    def containers(self) -> list[Any]:
        from cascade_envs.sandbox import images

        return images.client(self.url).api.containers(all=True)

    def close(self) -> None:
        self.stop()
        subprocess.run(
            ["umount", "-R", "-l", str(self.folder / "data")], capture_output=True
        )  # leftover overlays
        subprocess.run(["ip", "link", "delete", self.bridge], capture_output=True)
        shutil.rmtree(self.folder, ignore_errors=True)
