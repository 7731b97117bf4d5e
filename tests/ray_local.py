"""A module-scoped local Ray instance for tests: 2 CPUs, private temp dirs, no dashboard."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def local_ray():
    ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'cascade-envs[ray]')")
    root = Path(tempfile.mkdtemp(prefix="cr-"))  # short: Ray's socket paths must stay under 108 bytes
    mp = pytest.MonkeyPatch()
    mp.setenv("RAY_TMPDIR", str(root))
    mp.setenv("HOME", str(root))
    mp.setenv("RAY_USAGE_STATS_ENABLED", "0")
    mp.setenv(
        "RAY_AUTH_MODE", "disabled"
    )  # a token cached by an earlier instance of this process would not match
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, _temp_dir=str(root / "t"))
    yield ray
    ray.shutdown()
    mp.undo()
    shutil.rmtree(root, ignore_errors=True)


def kill_and_wait(actor, timeout_s: float = 60.0) -> None:
    """``ray.kill`` the actor and wait until it refuses calls (``ray.kill`` is asynchronous)."""
    import time

    import ray

    ray.kill(actor, no_restart=True)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            ray.get(actor.ready.remote(), timeout=timeout_s)
        except ray.exceptions.RayActorError:
            return
        time.sleep(0.05)
    raise AssertionError(f"actor still answers {timeout_s:g} s after ray.kill")
