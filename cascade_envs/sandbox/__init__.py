"""Sandboxes for running untrusted (model-written) code.

``get_sandbox()`` gives the default backend (``bwrap`` where it works, else ``local``);
``get_sandbox("docker")`` any registered one. Every backend offers the same protocol::

    sb = get_sandbox()
    result = await sb.arun(["python3", "main.py"], files={"main.py": src}, stdin="1 2\\n",
                           timeout_s=2, memory_mb=256)          # -> ExecResult
    async with await sb.asession() as s:                         # compile once, run many
        await s.awrite({"a.cpp": src})
        await s.arun(["g++", "-O2", "a.cpp"])
        for test in tests:
            await s.arun(["./a.out"], test.input, timeout_s=1)

Model code never runs unsandboxed unless the backend ``"unsafe-subprocess"`` is named explicitly.
Third-party backends register through the ``cascade_envs_register_sandboxes`` plugin hook.
"""

from __future__ import annotations

from typing import Any

from ..registry import sandboxes
from .base import Sandbox, Session
from .results import EXECUTABLE, ExecResult, File, SandboxError

DEFAULT_ORDER = ("bwrap", "local")

__all__ = [
    "EXECUTABLE",
    "ExecResult",
    "File",
    "Sandbox",
    "SandboxError",
    "Session",
    "available_backends",
    "default_backend",
    "get_sandbox",
]


def available_backends() -> dict[str, str | None]:
    """Every registered backend with ``None`` if it works here, else the reason it does not."""
    out: dict[str, str | None] = {}
    for name, spec in sandboxes.items():
        try:
            out[name] = spec.load().unavailable()
        except Exception as exc:  # a backend whose dependency is missing
            out[name] = str(exc)
    return out


def default_backend() -> str:
    """The isolating backend used when none is named: ``bwrap``, else ``local``."""
    reasons = []
    for name in DEFAULT_ORDER:
        reason = sandboxes.get(name).load().unavailable()
        if reason is None:
            return name
        reasons.append(f"{name}: {reason}")
    raise SandboxError("no sandbox backend works here (" + "; ".join(reasons) + ")")


def get_sandbox(backend: str | Sandbox | None = None, **options: Any) -> Sandbox:
    """A sandbox by backend name (``None``: the default); an instance is returned as is."""
    if isinstance(backend, Sandbox):
        return backend
    name = backend or default_backend()
    cls = sandboxes.get(name).load()
    reason = cls.unavailable()
    if reason is not None:
        raise SandboxError(f"sandbox backend {name!r} is unavailable: {reason}")
    return cls(**options)
