"""Placement groups for env actors: reserve one CPU bundle per actor, packed or spread over nodes.

``actor_options: {placement_strategy: SPREAD}`` (or ``PACK``, ``STRICT_PACK``, ``STRICT_SPREAD``)
makes a pool reserve ``{CPU: num_cpus}`` bundles up front (``num_cpus`` of the actor options,
default 1) and schedule actor ``i`` into bundle ``i``; a replaced actor goes back into its bundle.
Rollout engines and trainer ranks (``trainer/ray_engine.py``, ``trainer/ray_ranks.py``) reserve
their own bundles (GPU and CPU) through ``reserve_bundles``.
"""

from __future__ import annotations

from typing import Any

from ..core import CascadeError

STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")


def reserve(ray: Any, count: int, strategy: Any, num_cpus: float, timeout_s: float) -> Any:
    """A ready placement group of ``count`` CPU bundles, or a ``CascadeError`` naming the option."""
    if not isinstance(strategy, str) or strategy.upper() not in STRATEGIES:
        raise CascadeError(
            f"actor_options.placement_strategy: expected one of {', '.join(STRATEGIES)}, got {strategy!r}"
        )
    return reserve_bundles(
        ray, [{"CPU": num_cpus}] * count, strategy, timeout_s, "actor_options.placement_strategy"
    )


def reserve_bundles(
    ray: Any, bundles: list[dict[str, float]], strategy: str, timeout_s: float, what: str
) -> Any:
    """A ready placement group of ``bundles`` (e.g. ``{GPU: 1, CPU: 1}``), or a ``CascadeError`` naming ``what``."""
    if not isinstance(strategy, str) or strategy.upper() not in STRATEGIES:
        raise CascadeError(
            f"{what}: placement strategy must be one of {', '.join(STRATEGIES)}, got {strategy!r}"
        )
    from ray.util.placement_group import placement_group, remove_placement_group

    group = placement_group(bundles, strategy=strategy.upper())
    ready, _ = ray.wait([group.ready()], timeout=timeout_s)
    if not ready:
        remove_placement_group(group)
        shape = ", ".join(sorted({str(b) for b in bundles}))
        raise CascadeError(
            f"{what}: {len(bundles)} bundle(s) of {shape} ({strategy.upper()}) could not be reserved "
            f"within {timeout_s:g} s (cluster resources: {ray.cluster_resources()})"
        )
    return group


def bundle_options(group: Any, index: int) -> dict[str, Any]:
    """``.options()`` that schedule an actor into bundle ``index`` of ``group``."""
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    return {
        "scheduling_strategy": PlacementGroupSchedulingStrategy(
            placement_group=group, placement_group_bundle_index=index
        )
    }


def remove(group: Any) -> None:
    from ray.util.placement_group import remove_placement_group

    remove_placement_group(group)
