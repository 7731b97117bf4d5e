"""Sandboxes for running untrusted (model-written) code.

``get_sandbox()`` gives the default backend: ``bwrap``, the one that keeps the default's promise
without a daemon (model code writes nowhere but its size-capped work dir, ``/tmp`` and ``/dev/shm``,
whose contents count against its memory; reads no host file but ``/usr`` and what it is given;
reaches no network). Where it does not work, ``get_sandbox()`` refuses with one line naming the fix
(install bubblewrap, use docker, or name a weaker backend); it never falls back to something weaker. ``get_sandbox("docker")``,
``get_sandbox("local")`` or any registered backend, by name. Every backend offers the same protocol::

    sb = get_sandbox()
    result = await sb.arun(["python3", "main.py"], files={"main.py": src}, stdin="1 2\\n",
                           timeout_s=2, memory_mb=256)          # -> ExecResult
    async with await sb.asession() as s:                         # compile once, run many
        await s.awrite({"a.cpp": src})
        await s.arun(["g++", "-O2", "a.cpp"])
        for test in tests:
            await s.arun(["./a.out"], test.input, timeout_s=1)

``get_sandbox("docker")`` keeps the same promise in containers of an image built offline
(``cascade-envs build-image sandbox``, ``images.py``); it is never chosen without being named.
The backend chosen is logged once per process (a warning for backends weaker than the default).
Model code never runs unsandboxed unless the backend ``"unsafe-subprocess"`` is named explicitly.
Agentic envs give a session a ``Workspace`` (``workspace.py``): a repository at its own path
(e.g. ``/testbed``), an image or root, extra mounts. Third-party backends register through the
``cascade_envs_register_sandboxes`` plugin hook.
"""

from __future__ import annotations

import logging
from typing import Any

from ..registry import sandboxes
from .base import Sandbox, Session
from .results import EXECUTABLE, ExecResult, File, SandboxError
from .workspace import Mount, Workspace

DEFAULT_ORDER = ("bwrap",)
"""Backends tried, in order, when none is named: only those that keep the default's promise."""
REFUSAL_FIX = (
    "install bubblewrap (apt-get install bubblewrap), use the 'docker' backend, "
    "or name a weaker backend explicitly (sandbox='local', --backend local)"
)

log = logging.getLogger("cascade_envs.sandbox")
_announced: set[str] = set()

__all__ = [
    "EXECUTABLE",
    "ExecResult",
    "File",
    "Mount",
    "Sandbox",
    "SandboxError",
    "Session",
    "Workspace",
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
    """The backend used when none is named: ``bwrap``; else ``SandboxError`` with a one-line fix."""
    reasons = []
    for name in DEFAULT_ORDER:
        reason = sandboxes.get(name).load().unavailable()
        if reason is None:
            return name
        reasons.append(f"{name}: {' '.join(reason.split())}")
    raise SandboxError(
        f"no sandbox here can keep model code off the host ({'; '.join(reasons)}): {REFUSAL_FIX}"
    )


def _announce(cls: type[Sandbox], how: str) -> None:
    if cls.name in _announced:
        return
    _announced.add(cls.name)
    if cls.caveat:
        log.warning("sandbox backend %r (%s; %s)", cls.name, how, cls.caveat)
    else:
        log.info("sandbox backend %r (%s)", cls.name, how)


def get_sandbox(backend: str | Sandbox | None = None, **options: Any) -> Sandbox:
    """A sandbox by backend name (``None``: the default, or a refusal); an instance is returned as is."""
    if isinstance(backend, Sandbox):
        return backend
    name = backend or default_backend()
    cls = sandboxes.get(name).load()
    reason = cls.unavailable()
    if reason is not None:
        raise SandboxError(f"sandbox backend {name!r} is unavailable: {' '.join(reason.split())}")
    sandbox = cls(**options)
    _announce(cls, "named" if backend else "default")
    return sandbox
