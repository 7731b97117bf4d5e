"""Registries of environments, sandboxes, judges, loss strategies and tool parsers, filled through plugin hooks.

One mechanism serves every kind: a ``Registry`` maps ids to values; env, sandbox, judge and loss
strategy registries hold ``Spec`` objects (an ``entry_point`` imported only when the thing is made). The
env registry is mirrored into gymnasium's, so ``gymnasium.make("cascade/MCQA-v0")`` works once
the registry has loaded (any ``cascade_envs.make``/``spec``/``env_specs`` call, or
``import cascade_envs.gym``).

This module knows nothing of plugins: the registries of ``PLUGIN_REGISTRIES`` are filled by a loader
injected with ``set_plugin_loader`` (``cascade_envs/__init__.py`` installs the plugin manager's, which
is imported on first access only).
"""

from __future__ import annotations

import difflib
import importlib
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from .core import CascadeError

T = TypeVar("T")
ENV_ID_RE = re.compile(r"^(?:(?P<namespace>[\w:.-]+)/)?(?P<name>[\w:.-]+?)(?:-v(?P<version>\d+))?$")


class UnknownIdError(CascadeError, KeyError):
    """An id that no registry entry (and no loaded plugin) provides."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0])


@dataclass
class Spec:
    """A registered, not yet imported, environment/sandbox/judge."""

    id: str
    entry_point: str | Callable[..., Any]
    """``"pkg.mod:Attr"`` (imported at ``make``), or the callable itself for run-time registrations."""
    kwargs: dict[str, Any] = field(default_factory=dict)
    plugin: str = ""
    distribution: str = ""
    version: str = ""

    def load(self) -> Any:
        """Import and return the object named by ``entry_point`` (``"pkg.mod:Attr"``, or the object)."""
        if not isinstance(self.entry_point, str):
            return self.entry_point
        module_name, _, attr = self.entry_point.partition(":")
        try:
            obj: Any = importlib.import_module(module_name)
            for part in attr.split(".") if attr else ():
                obj = getattr(obj, part)
        except ImportError as exc:
            raise CascadeError(_missing_dependency_message(self, exc)) from exc
        except AttributeError as exc:
            raise CascadeError(f"{self.id}: entry point {self.entry_point!r} not found: {exc}") from exc
        return obj

    def make(self, **kwargs: Any) -> Any:
        return self.load()(**{**self.kwargs, **kwargs})


def _missing_dependency_message(spec: Spec, exc: ImportError) -> str:
    from ._extras import extra_for_module

    missing = exc.name or ""
    extra = extra_for_module(missing)
    hint = f"; install it with: pip install 'cascade-envs[{extra}]'" if extra else ""
    return f"{spec.id} needs the module {missing!r}, which is not installed{hint}"


class Registry(Generic[T]):
    """A name → value map with "did you mean" errors; ``loader`` fills it on first access.

    ``note()``, when given, is appended to "unknown id" errors (e.g. which plugins failed to load).
    """

    def __init__(
        self, kind: str, loader: Callable[[], None] | None = None, *, note: Callable[[], str] | None = None
    ):
        self.kind = kind
        self._items: dict[str, T] = {}
        self._loader = loader
        self._note = note
        self._loaded = loader is None

    def set_loader(self, loader: Callable[[], None] | None, *, note: Callable[[], str] | None = None) -> None:
        """Fill the registry with ``loader()`` on its next access (``None``: nothing to load)."""
        self._loader = loader
        self._note = note
        self._loaded = loader is None

    @property
    def is_loaded(self) -> bool:
        """Whether the loader has run (or there is none)."""
        return self._loaded

    def ensure_loaded(self) -> None:
        """Run the loader once, before the first lookup."""
        if not self._loaded:
            self._loaded = True
            assert self._loader is not None
            self._loader()

    def mark_loaded(self) -> None:
        """Record that the registry is filled without running its loader (a loader filling several)."""
        self._loaded = True

    def clear(self) -> None:
        """Forget every entry (the loaded state is kept)."""
        self._items.clear()

    def reset(self) -> None:
        """Forget every entry and load again on the next access."""
        self._items.clear()
        self._loaded = self._loader is None

    def register(self, name: str, value: T, *, replace: bool = False) -> None:
        if name in self._items and not replace:
            raise CascadeError(f"{self.kind} {name!r} is already registered")
        self._items[name] = value

    def unregister(self, name: str) -> None:
        self._items.pop(name, None)

    def get(self, name: str) -> T:
        self.ensure_loaded()
        try:
            return self._items[name]
        except KeyError:
            raise UnknownIdError(self._unknown_message(name)) from None

    def _unknown_message(self, name: str) -> str:
        close = difflib.get_close_matches(name, list(self._items), n=3, cutoff=0.5)
        hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        note = self._note() if self._note is not None else ""
        return f"unknown {self.kind} {name!r}{hint}{note}"

    def __contains__(self, name: object) -> bool:
        self.ensure_loaded()
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        self.ensure_loaded()
        return iter(sorted(self._items))

    def items(self) -> list[tuple[str, T]]:
        self.ensure_loaded()
        return sorted(self._items.items())


envs: Registry[Spec] = Registry("environment")
sandboxes: Registry[Spec] = Registry("sandbox backend")
judges: Registry[Spec] = Registry("judge")
loss_strategies: Registry[Spec] = Registry("loss strategy")
"""The trainer's loss strategies (``algorithm:`` in a run config; ``cascade_envs.trainer.strategies``)."""
PLUGIN_REGISTRIES: tuple[Registry[Spec], ...] = (envs, sandboxes, judges, loss_strategies)
"""The registries that plugin hooks fill; one loader fills them all."""


def set_plugin_loader(loader: Callable[[], None] | None, note: Callable[[], str] | None = None) -> None:
    """Install the loader that fills the plugin registries on first access."""
    for target in PLUGIN_REGISTRIES:
        target.set_loader(loader, note=note)


def check_env_id(env_id: str) -> None:
    if not ENV_ID_RE.match(env_id) or "/" not in env_id:
        raise CascadeError(f"env id {env_id!r} must look like 'namespace/Name-vN'")


def spec(env_id: str) -> Spec:
    """The registered spec of ``env_id``."""
    return envs.get(env_id)


def make(env_id: str, **kwargs: Any) -> Any:
    """Build the environment registered as ``env_id``; ``kwargs`` override the spec's defaults.

    What the entry point builds must be a ``gymnasium.Env`` (a ``cascade_envs.Env`` to be played
    by the runner); anything else is an error naming the entry point and its plugin.
    """
    import gymnasium

    env_spec = spec(env_id)
    env = env_spec.make(**kwargs)
    if not isinstance(env, gymnasium.Env):
        where = f"plugin {env_spec.plugin!r}" + (
            f" ({env_spec.distribution} {env_spec.version})" if env_spec.distribution else ""
        )
        raise CascadeError(
            f"{env_id}: entry point {env_spec.entry_point!r} of {where} made a {type(env).__name__}, not an "
            "environment; an env entry point must name a gymnasium.Env subclass (cascade_envs.Env to be rolled out)"
        )
    return env


def env_specs() -> dict[str, Spec]:
    """All registered environment specs, by id."""
    return dict(envs.items())


_synced_ids: set[str] = set()


def sync_gymnasium() -> None:
    """Mirror the env registry into gymnasium's, replacing what an earlier sync put there."""
    import gymnasium

    for env_id in _synced_ids - set(envs):
        gymnasium.registry.pop(env_id, None)
    for env_id, env_spec in envs.items():
        if env_id in gymnasium.registry and env_id not in _synced_ids:
            continue  # registered in gymnasium by someone else: leave it alone
        _synced_ids.add(env_id)
        gymnasium.registry.pop(env_id, None)
        gymnasium.register(
            id=env_id,
            entry_point=env_spec.entry_point,
            kwargs=dict(env_spec.kwargs),
            disable_env_checker=True,
        )


def register(env_id: str, entry_point: str | Callable[..., Any], **kwargs: Any) -> None:
    """Register an environment at run time (plugins use the hook instead).

    ``entry_point`` is ``"pkg.mod:Class"`` or the class itself (kept as is when it cannot be
    imported by name, e.g. a class defined inside a function).
    """
    check_env_id(env_id)
    if not isinstance(entry_point, str) and "<locals>" not in getattr(
        entry_point, "__qualname__", "<locals>"
    ):
        entry_point = f"{entry_point.__module__}:{entry_point.__qualname__}"
    envs.ensure_loaded()
    envs.register(env_id, Spec(env_id, entry_point, kwargs, plugin="<runtime>"), replace=True)
    sync_gymnasium()
