import os
from pathlib import Path

import pytest

from cascade_envs.sandbox import available_backends, get_sandbox

ISOLATING = ("bwrap", "local")


def backend_or_skip(name: str, **options):
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
    return backend_or_skip("bwrap", timeout_s=3, memory_mb=256, output_limit_mb=1, file_mb=8, nproc=32, workdir_mb=16)


def host_pids_of(uid: int, name: str) -> list[int]:
    """Host processes of ``uid`` called ``name`` (other sandboxes may legitimately be running)."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}").st_uid == uid and Path(f"/proc/{entry}/comm").read_text().strip() == name:
                    pids.append(int(entry))
            except OSError:
                pass
    return pids
