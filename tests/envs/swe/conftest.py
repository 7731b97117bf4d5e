"""Shared helpers of the SWE env tests: the bundled rows, a workspace session on them, tool-call text."""

from __future__ import annotations

import json
from collections.abc import Sequence
from importlib import resources
from typing import Any

import pytest

from cascade_envs.envs.swe.conformance import FIX as INILITE_FIX
from cascade_envs.envs.swe.conformance import tool_call as call
from cascade_envs.envs.swe.task import SweTask, read_task
from cascade_envs.sandbox import Sandbox, Session, Workspace
from tests import docker_support
from tests.sandbox.conftest import backend_or_skip

LIMITS = {"timeout_s": 20, "memory_mb": 512, "output_limit_mb": 1, "file_mb": 8, "nproc": 64}


def bundled_rows() -> list[dict[str, Any]]:
    text = (
        resources.files("cascade_envs.envs")
        .joinpath("swe", "data", "tasks.jsonl")
        .read_text(encoding="utf-8")
    )
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def row(name: str) -> dict[str, Any]:
    """The bundled row of repository ``name`` (``durations`` or ``inilite``)."""
    return next(r for r in bundled_rows() if r["repo"].endswith("/" + name))


def fix_calls(name: str) -> list[str]:
    """Tool calls that fix repository ``name`` the way its gold patch does."""
    if name == "inilite":
        return [INILITE_FIX]
    return [
        call(
            "terminal",
            command="cat > /tmp/gold.patch <<'EOF'\n" + row(name)["patch"] + "EOF\n"
            "patch -p1 < /tmp/gold.patch",
        )
    ]


def swe_sandbox(backend: str, rows: Sequence[dict[str, Any]] = (), **options: Any) -> Sandbox:
    """The sandbox of ``backend`` for SWE episodes; on docker, the rows' per-instance images are built first."""
    if backend == "docker":
        docker_support.require("swe-base")
        from cascade_envs.envs.swe.images import build_images
        from cascade_envs.sandbox import images

        build_images([read_task(r) for r in rows], images.client(), log=lambda message: None)
    return backend_or_skip(backend, **{**LIMITS, **options})


async def open_session(task: SweTask, backend: str = "bwrap") -> Session:
    sandbox = backend_or_skip(backend, **LIMITS)
    return await sandbox.asession(workspace=Workspace(workdir=task.workdir), files=task.files)


@pytest.fixture
def durations() -> SweTask:
    return read_task(row("durations"))


@pytest.fixture
def inilite() -> SweTask:
    return read_task(row("inilite"))
