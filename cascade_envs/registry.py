"""Registries of environments, sandboxes, judges and tool parsers, filled through plugin hooks.

One mechanism serves every kind: a ``Registry`` maps ids to values; env, sandbox and judge
registries hold ``Spec`` objects (an ``entry_point`` imported only when the thing is made). The
env registry is mirrored into gymnasium's, so ``gymnasium.make("cascade/MCQA-v0")`` works once
the registry has loaded (any ``cascade_envs.make``/``spec``/``registry`` call, or
``import cascade_envs.gym``).
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
    entry_point: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    plugin: str = ""
    distribution: str = ""
    version: str = ""

    def load(self) -> Any:
        """Import and return the object named by ``entry_point`` (``"pkg.mod:Attr"``)."""
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
    """A name → value map with "did you mean" errors; ``loader`` fills it on first access."""

    def __init__(self, kind: str, loader: Callable[[], None] | None = None):
        self.kind = kind
        self._items: dict[str, T] = {}
        self._loader = loader
        self._loaded = loader is None

    def _ensure_loaded(self) -> None:
        if not self._loaded:
            self._loaded = True
            assert self._loader is not None
            self._loader()

    def register(self, name: str, value: T, *, replace: bool = False) -> None:
        if name in self._items and not replace:
            raise CascadeError(f"{self.kind} {name!r} is already registered")
        self._items[name] = value

    def unregister(self, name: str) -> None:
        self._items.pop(name, None)

    def get(self, name: str) -> T:
        self._ensure_loaded()
        try:
            return self._items[name]
        except KeyError:
            raise UnknownIdError(self._unknown_message(name)) from None

    def _unknown_message(self, name: str) -> str:
        close = difflib.get_close_matches(name, list(self._items), n=3, cutoff=0.5)
        hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        from .plugins.manager import broken_plugins_note  # plugins import registry

        return f"unknown {self.kind} {name!r}{hint}{broken_plugins_note()}"

    def __contains__(self, name: object) -> bool:
        self._ensure_loaded()
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        self._ensure_loaded()
        return iter(sorted(self._items))

    def items(self) -> list[tuple[str, T]]:
        self._ensure_loaded()
        return sorted(self._items.items())


def _load_plugins() -> None:
    from .plugins.manager import load_plugins

    load_plugins()


envs: Registry[Spec] = Registry("environment", _load_plugins)
sandboxes: Registry[Spec] = Registry("sandbox backend", _load_plugins)
judges: Registry[Spec] = Registry("judge", _load_plugins)


def check_env_id(env_id: str) -> None:
    if not ENV_ID_RE.match(env_id) or "/" not in env_id:
        raise CascadeError(f"env id {env_id!r} must look like 'namespace/Name-vN'")


def spec(env_id: str) -> Spec:
    """The registered spec of ``env_id``."""
    return envs.get(env_id)


def make(env_id: str, **kwargs: Any) -> Any:
    """Build the environment registered as ``env_id``; ``kwargs`` override the spec's defaults."""
    return spec(env_id).make(**kwargs)


def registry() -> dict[str, Spec]:
    """All registered environment specs, by id."""
    return dict(envs.items())


_synced_ids: set[str] = set()


def sync_gymnasium() -> None:
    """Mirror the env registry into gymnasium's, replacing what an earlier sync put there."""
    import gymnasium

    for env_id in _synced_ids - set(envs._items):
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


def register(env_id: str, entry_point: str | type, **kwargs: Any) -> None:
    """Register an environment at run time (plugins use the hook instead).

    ``entry_point`` is ``"pkg.mod:Class"`` or the class itself.
    """
    check_env_id(env_id)
    if not isinstance(entry_point, str):
        entry_point = f"{entry_point.__module__}:{entry_point.__qualname__}"
    envs._ensure_loaded()
    envs.register(env_id, Spec(env_id, entry_point, kwargs, plugin="<runtime>"), replace=True)
    sync_gymnasium()
