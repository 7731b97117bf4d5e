"""Plugin hooks (pluggy project ``cascade_envs``) and their loading from entry points."""

from .hookspecs import hookimpl, hookspec

__all__ = ["hookimpl", "hookspec"]
