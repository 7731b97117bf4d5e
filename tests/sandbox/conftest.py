import os
import random
from pathlib import Path

import pytest

from cascade_envs.sandbox import available_backends, get_sandbox
from tests import docker_support

ISOLATING = ("bwrap", "local", "docker")


def backend_or_skip(name: str, **options):
    """The backend with ``options``; skips (saying why) where it cannot run. Docker: see ``docker_support``."""
    if name == "docker":
        docker_support.require("sandbox")
    reason = available_backends().get(name, f"{name} is not registered")
    if reason is not None:
        pytest.skip(f"sandbox backend {name!r} unavailable here: {reason}")
    return get_sandbox(name, **options)


@pytest.fixture(params=ISOLATING)
def sandbox(request):
    """Each isolating backend with small limits (tests stay fast and bounded)."""
    return backend_or_skip(request.param, timeout_s=3, memory_mb=256, output_limit_mb=1, file_mb=8, nproc=32)


@pytest.fixture
def bwrap():
    return backend_or_skip(
        "bwrap", timeout_s=3, memory_mb=256, output_limit_mb=1, file_mb=8, nproc=32, workdir_mb=16
    )


def host_pids_of(uid: int, name: str, marker: str | None = None) -> list[int]:
    """Host processes of ``uid`` called ``name`` whose command line holds ``marker``.

    Other tests may run sandboxes under the same uid at the same time (xdist), so a test gives its
    own processes a unique ``marker`` (an argument such as ``$0`` or a sleep time) and looks only for it.
    """
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if (
                    os.stat(f"/proc/{entry}").st_uid != uid
                    or Path(f"/proc/{entry}/comm").read_text().strip() != name
                ):
                    continue
                if marker is None or marker.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                    pids.append(int(entry))
            except OSError:
                pass
    return pids


def unique_marker() -> str:
    """A sleep time no other test uses (``sleep 30.123456``), to find this test's processes on the host."""
    return f"{30 + random.random():.6f}"
