"""Registers the built-in sandbox backends through the same hook third-party backends use."""

from __future__ import annotations

from ..plugins import hookimpl

BUILTIN_SANDBOXES = {
    "bwrap": "cascade_envs.sandbox.bwrap:BwrapSandbox",
    "local": "cascade_envs.sandbox.local:LocalSandbox",
    "docker": "cascade_envs.sandbox.docker:DockerSandbox",
    "unsafe-subprocess": "cascade_envs.sandbox.unsafe:UnsafeSubprocessSandbox",
}


@hookimpl
def cascade_envs_register_sandboxes(register) -> None:
    for name, entry_point in BUILTIN_SANDBOXES.items():
        register(name, entry_point=entry_point)
