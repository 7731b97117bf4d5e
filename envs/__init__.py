"""Built-in environments, one subpackage per domain, registered through the plugin hook."""

from __future__ import annotations

from ..plugins import hookimpl

BUILTIN_ENVS: dict[str, tuple[str, dict]] = {
    # id: (entry point, default kwargs) -- each domain adds its line(s) here
}


DEFAULT_EVAL_ENVS: tuple[str, ...] = (
    # the domains that run on a CPU with no judge server: `cascade-envs eval` plays these by default
)


@hookimpl
def cascade_envs_register_envs(register) -> None:
    for env_id, (entry_point, kwargs) in BUILTIN_ENVS.items():
        register(env_id, entry_point=entry_point, **kwargs)
