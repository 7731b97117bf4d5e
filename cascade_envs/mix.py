"""``EnvMix``: seeded, weighted sampling of tasks over several environments.

The mix format (``eval --mix FILE.yaml``, a run config's ``mix.envs``) is read by one parser,
``parse_mix``: ``{ENV_ID: WEIGHT}`` or ``{ENV_ID: {weight: W, kwargs: {...}, env: REGISTERED_ID}}``.
An entry with ``env`` plays that registered env under its own id (e.g. two NeMo Gym servers through
``nemo-gym/Resources-v0``): the id is registered for this process with the same entry point.
"""

from __future__ import annotations

import difflib
import logging
import math
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from .core import CascadeError
from .data import Loaded
from .env_set import EnvSet
from .registry import ENV_ID_RE, UnknownIdError, register, spec

log = logging.getLogger("cascade_envs.mix")

ENTRY_KEYS = ("weight", "kwargs", "env")
"""The keys of a ``{weight: W, kwargs: {...}, env: ID}`` mix entry."""
MIX_FILE_KEYS = ("envs",)
"""The top-level keys of a mix file."""
_YAML11_FLOAT = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+$")  # PyYAML reads "1e-3" as a string


def _check_weight(where: str, weight: Any) -> float:
    if isinstance(weight, str) and _YAML11_FLOAT.match(weight.strip()):
        weight = float(weight)
    if not isinstance(weight, (int, float)) or isinstance(weight, bool) or not math.isfinite(weight):
        raise CascadeError(f"{where} must be a finite number, got {weight!r}")
    if weight < 0:
        raise CascadeError(f"{where} is negative ({weight})")
    return float(weight)


def normalise_weights(weights: Mapping[str, float]) -> dict[str, float]:
    """Check weights (finite, non-negative, some positive) and scale them to sum to one."""
    if not weights:
        raise CascadeError("an env mix needs at least one env")
    checked = {env_id: _check_weight(f"weight of {env_id!r}", w) for env_id, w in weights.items()}
    total = sum(checked.values())
    if total <= 0:
        raise CascadeError("env mix weights sum to zero")
    if not math.isclose(total, 1.0, rel_tol=1e-6):
        log.warning("env mix weights sum to %.6g, not 1; normalising", total)
    return {env_id: w / total for env_id, w in checked.items()}


def _did_you_mean(key: Any, known: Iterable[str]) -> str:
    known = list(known)
    close = difflib.get_close_matches(str(key), known, n=1)
    return f"; did you mean {close[0]!r}?" if close else f" (known: {', '.join(known)})"


def _register_alias(where: str, env_id: str, base_id: Any) -> None:
    """Register ``env_id`` as another id of the env registered as ``base_id`` (same entry point)."""
    if not isinstance(base_id, str) or not ENV_ID_RE.match(base_id):
        raise CascadeError(
            f"{where}.env: expected a registered env id like 'namespace/Name-vN', got {base_id!r}"
        )
    try:
        base = spec(base_id)
    except UnknownIdError as exc:
        raise CascadeError(f"{where}.env: {exc}") from None
    try:
        taken = spec(env_id)
    except UnknownIdError:
        taken = None
    if taken is not None and (taken.plugin != "<runtime>" or taken.entry_point != base.entry_point):
        raise CascadeError(f"{where}: {env_id!r} is already a registered env; give this entry another id")
    register(env_id, base.entry_point, **base.kwargs)


def parse_mix(envs: Any, *, source: str = "mix.envs") -> tuple[dict[str, float], dict[str, dict[str, Any]]]:
    """Read a mix's ``envs`` mapping into ``(weights, env_kwargs)``.

    Each value is a weight or ``{weight: W, kwargs: {...}, env: ID}`` (weight 1 when left out; with
    ``env``, the entry's id is registered as that env's, see ``_register_alias``). Weights are
    checked (finite, non-negative, not all zero) but not normalised; every id gets a kwargs dict.
    Errors are ``CascadeError``s naming the key after ``source``: ``mix.envs.cascade/MCQA-v0.weight``
    (a ``source`` ending in ``:`` is followed by a space instead of a dot: ``--mix: cascade/MCQA-v0``).
    """
    name, sep = (source[:-1], ": ") if source.endswith(":") else (source, ".")
    if not isinstance(envs, Mapping):
        raise CascadeError(f"{name}: expected a mapping {{ENV_ID: WEIGHT}}, got {type(envs).__name__}")
    if not envs:
        raise CascadeError(f"{name} is empty: name at least one env id with its weight")
    weights: dict[str, float] = {}
    env_kwargs: dict[str, dict[str, Any]] = {}
    for env_id, value in envs.items():
        where = f"{name}{sep}{env_id}"
        if not isinstance(env_id, str) or "/" not in env_id or not ENV_ID_RE.match(env_id):
            raise CascadeError(f"{name}: env id {env_id!r} must look like 'namespace/Name-vN'")
        kwargs: Any = None
        if isinstance(value, Mapping):
            for key in value:
                if key not in ENTRY_KEYS:
                    raise CascadeError(f"{where}: unknown key {key!r}{_did_you_mean(key, ENTRY_KEYS)}")
            weight = _check_weight(f"{where}.weight", value.get("weight", 1.0))
            kwargs = value.get("kwargs")
            if "env" in value:
                _register_alias(where, env_id, value["env"])
        elif isinstance(value, (int, float, str)) and not isinstance(value, bool):
            weight = _check_weight(where, value)
        else:
            raise CascadeError(f"{where}: expected a weight or {{weight: W, kwargs: {{...}}}}, got {value!r}")
        if kwargs is not None and not isinstance(kwargs, Mapping):
            raise CascadeError(f"{where}.kwargs: expected a mapping of keyword arguments, got {kwargs!r}")
        if kwargs and not all(isinstance(k, str) for k in kwargs):
            raise CascadeError(f"{where}.kwargs: keyword names must be strings, got {list(kwargs)!r}")
        weights[env_id] = weight
        env_kwargs[env_id] = dict(kwargs or {})
    if sum(weights.values()) <= 0:
        raise CascadeError(f"{name}: the weights sum to zero; give at least one env a positive weight")
    return weights, env_kwargs


def load_mix_file(path: str | Path) -> tuple[dict[str, float], dict[str, dict[str, Any]]]:
    """Read a mix YAML file (``envs: {ENV_ID: WEIGHT | {weight: W, kwargs: {...}}}``) with ``parse_mix``."""
    import yaml

    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise CascadeError(f"cannot read mix file {path}: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise CascadeError(f"{path} is not valid YAML: {exc}") from None
    if not isinstance(data, Mapping) or "envs" not in data:
        raise CascadeError(f"{path}: expected a mapping 'envs: {{ENV_ID: WEIGHT}}'")
    for key in data:
        if key not in MIX_FILE_KEYS:
            raise CascadeError(f"{path}: unknown key {key!r}{_did_you_mean(key, MIX_FILE_KEYS)}")
    return parse_mix(data["envs"], source=f"{path}: envs")


class EnvMix:
    """Weighted sampling over env ids.

    Each env's tasks are drawn without replacement in a seeded shuffled order (a new shuffle per
    pass), so a mix visits every task of an env before repeating one. The instances are made up
    front in ``envs``, an ``EnvSet`` that owns them: close it when the run ends (the mix only samples).
    """

    def __init__(
        self,
        weights: Mapping[str, float] | Iterable[str],
        *,
        seed: int = 0,
        env_kwargs: Mapping[str, Mapping[str, Any]] | None = None,
    ):
        if not isinstance(weights, Mapping):
            ids = list(weights)
            weights = {env_id: 1.0 / max(len(ids), 1) for env_id in ids}
        self.weights = normalise_weights(weights)
        self.envs = EnvSet(env_kwargs)
        for env_id in self.weights:
            env = self.envs.env(env_id)
            if env.tasks is None or len(env.tasks) == 0:
                raise CascadeError(f"{env_id} has no tasks: give it tasks= in the mix's env kwargs")
        self._rng = np.random.default_rng(seed)
        self._orders: dict[str, list[int]] = {env_id: [] for env_id in self.weights}

    @property
    def ids(self) -> list[str]:
        return list(self.weights)

    def _next_task(self, env_id: str) -> Loaded[Any]:
        tasks = self.envs[env_id].tasks
        assert tasks is not None
        order = self._orders[env_id]
        if not order:
            order.extend(int(i) for i in self._rng.permutation(len(tasks)))
        return tasks[order.pop()]

    def sample(self, n: int) -> list[tuple[str, Loaded[Any]]]:
        """Draw ``n`` ``(env_id, loaded task)`` items."""
        ids = self.ids
        probabilities = np.array([self.weights[i] for i in ids])
        picks = self._rng.choice(len(ids), size=n, p=probabilities)
        return [(ids[int(p)], self._next_task(ids[int(p)])) for p in picks]

    def all_tasks(self, limit: int | None = None) -> list[tuple[str, Loaded[Any]]]:
        """Every task of every env (at most ``limit`` per env), in file order: an evaluation pass."""
        items: list[tuple[str, Loaded[Any]]] = []
        for env_id, env in self.envs.items():
            assert env.tasks is not None
            items += [(env_id, task) for task in list(env.tasks)[:limit]]
        return items

    def state_dict(self) -> dict[str, Any]:
        """Sampler state, for checkpoint/resume."""
        return {"rng": self._rng.bit_generator.state, "orders": {k: list(v) for k, v in self._orders.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._rng.bit_generator.state = state["rng"]
        self._orders = {k: list(v) for k, v in state["orders"].items()}
