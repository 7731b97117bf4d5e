"""Discovery: built-in plugins, then third-party ones from the ``cascade_envs`` entry-point group.

Every plugin is called on its own, so one that fails to import, raises in a hook or registers a
clashing id is reported once (name, distribution, error), contributes nothing, and never breaks
the others. ``CASCADE_ENVS_DISABLE_PLUGIN_AUTOLOAD=1`` skips third-party discovery.

The registries do not import this module: ``cascade_envs/__init__.py`` installs ``load_plugins`` and
``broken_plugins_note`` as their loader (``registry.set_plugin_loader``), imported on first access.
This module uses only the registries' public API.
"""

from __future__ import annotations

import importlib
import logging
import os
from dataclasses import dataclass
from importlib import metadata
from types import ModuleType
from typing import Any

import pluggy

from ..registry import Registry, Spec, check_env_id, envs, judges, loss_strategies, sandboxes, sync_gymnasium
from . import hookspecs

log = logging.getLogger("cascade_envs.plugins")

ENTRY_POINT_GROUP = hookspecs.PROJECT
DISABLE_ENV = "CASCADE_ENVS_DISABLE_PLUGIN_AUTOLOAD"
BUILTIN_PLUGINS = ("cascade_envs.envs", "cascade_envs.sandbox.plugin", "cascade_envs.trainer.plugin")
"""Modules of this distribution that implement hooks, registered exactly like third-party ones."""


@dataclass(frozen=True)
class PluginInfo:
    name: str
    distribution: str
    version: str


@dataclass(frozen=True)
class PluginFailure:
    plugin: PluginInfo
    error: str

    def __str__(self) -> str:
        p = self.plugin
        return f"plugin {p.name!r} ({p.distribution} {p.version}): {self.error}"


_failures: list[PluginFailure] = []
_HOOKS: tuple[tuple[str, Registry[Spec]], ...] = (
    ("cascade_envs_register_envs", envs),
    ("cascade_envs_register_sandboxes", sandboxes),
    ("cascade_envs_register_judges", judges),
    ("cascade_envs_register_loss_strategies", loss_strategies),
)


def failures() -> list[PluginFailure]:
    """Plugins that failed during the last discovery."""
    return list(_failures)


def broken_plugins_note() -> str:
    """A sentence for "unknown id" errors naming plugins that failed and might have provided it."""
    if not _failures:
        return ""
    return "; these plugins failed to load and may provide it: " + "; ".join(map(str, _failures))


def _own_version() -> str:
    try:
        return metadata.version("cascade-envs")
    except metadata.PackageNotFoundError:
        return "0+unknown"


def _fail(info: PluginInfo, error: BaseException | str) -> None:
    text = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
    failure = PluginFailure(info, text)
    _failures.append(failure)
    log.warning("cascade-envs: %s", failure)


def _discover(pm: pluggy.PluginManager) -> dict[str, PluginInfo]:
    infos: dict[str, PluginInfo] = {}
    own = PluginInfo("", "cascade-envs", _own_version())
    for module_name in BUILTIN_PLUGINS:
        module: ModuleType = importlib.import_module(module_name)
        pm.register(module, name=module_name)
        infos[module_name] = PluginInfo(module_name, own.distribution, own.version)
    if os.environ.get(DISABLE_ENV, "").strip() not in ("", "0"):
        return infos
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        dist = ep.dist
        info = PluginInfo(ep.name, dist.name if dist else "?", dist.version if dist else "?")
        try:
            plugin = ep.load()
            if pm.has_plugin(ep.name):
                raise RuntimeError(f"another plugin is already named {ep.name!r}")
            pm.register(plugin, name=ep.name)
        except Exception as exc:
            _fail(info, exc)
            continue
        infos[ep.name] = info
    return infos


def _stager(target: Registry[Spec], info: PluginInfo, staged: list[Spec]) -> hookspecs.Register:
    """The ``register`` callable handed to one plugin's hook: it stages specs for ``target``."""

    def register(id: str, entry_point: str, **kwargs: Any) -> None:
        if not isinstance(entry_point, str) or ":" not in entry_point:
            raise ValueError(f"{id}: entry_point must look like 'package.module:Attr'")
        if target is envs:
            check_env_id(id)
        staged.append(Spec(id, entry_point, kwargs, info.name, info.distribution, info.version))

    return register


def _run_hooks(pm: pluggy.PluginManager, infos: dict[str, PluginInfo]) -> None:
    """Call every plugin's hooks, then register each plugin's specs only if all its hooks worked.

    A plugin that fails in any hook, or clashes with an id registered before it, contributes
    nothing to any registry: no half of a broken plugin stays behind.
    """
    staged: dict[str, list[tuple[Registry[Spec], Spec]]] = {name: [] for name in infos}
    failed: set[str] = set()
    for hook_name, target in _HOOKS:
        target.mark_loaded()  # the first access of any of them loads them all
        for impl in getattr(pm.hook, hook_name).get_hookimpls():
            name = impl.plugin_name
            if name in failed:
                continue
            specs: list[Spec] = []
            try:
                impl.function(register=_stager(target, infos[name], specs))
            except Exception as exc:
                _fail(infos[name], exc)
                failed.add(name)
                continue
            staged[name] += [(target, spec) for spec in specs]
    for name, entries in staged.items():
        if name in failed:
            continue
        clash = next(((t, s) for t, s in entries if s.id in t), None)
        if clash is not None:
            target, spec = clash
            _fail(
                infos[name],
                f"{target.kind} {spec.id!r} is already registered by {target.get(spec.id).plugin!r}",
            )
            continue
        for target, spec in entries:
            target.register(spec.id, spec)


def load_plugins() -> None:
    """Run discovery and fill the plugin registries (called lazily, once)."""
    _failures.clear()
    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    _run_hooks(pm, _discover(pm))
    sync_gymnasium()


def reload_plugins() -> None:
    """Forget every registration and discover again (after installing or removing a plugin)."""
    importlib.invalidate_caches()
    for _, target in _HOOKS:
        target.clear()
    load_plugins()
